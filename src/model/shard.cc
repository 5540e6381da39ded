#include "model/shard.h"

#include <numeric>

#include "core/error.h"

namespace strata {

ModelShard ModelShard::whole(const ModelConfig& config) {
  ModelShard s;
  s.chunks = {{0, config.n_layer}};
  return s;
}

bool ModelShard::holds_layer(int64_t layer) const {
  for (const LayerRange& r : chunks)
    if (layer >= r.begin && layer < r.end) return true;
  return false;
}

std::vector<int64_t> stage_layer_counts(int64_t n_layer, int stages,
                                        const std::vector<int64_t>& explicit_counts) {
  if (!explicit_counts.empty()) {
    STRATA_CHECK(static_cast<int>(explicit_counts.size()) == stages,
                 "parallel.stage_layers: ", explicit_counts.size(),
                 " entries, but pp * vpp = ", stages, " virtual stages need one layer count each");
    int64_t sum = 0;
    for (int64_t n : explicit_counts) {
      STRATA_CHECK(n >= 1, "parallel.stage_layers: every stage needs at least one layer, got ", n);
      sum += n;
    }
    STRATA_CHECK(sum == n_layer, "parallel.stage_layers: the counts add up to ", sum,
                 " layers, but model.n_layer = ", n_layer);
    return explicit_counts;
  }
  STRATA_CHECK(n_layer >= stages, "parallel.pp: ", stages,
               " pipeline stages (pp * vpp) need at least one layer each, but model.n_layer = ",
               n_layer, "; lower parallel.pp or parallel.vpp");
  std::vector<int64_t> counts(static_cast<size_t>(stages), n_layer / stages);
  int64_t extra = n_layer % stages;
  // Middle stages first (1, 2, ..., stages-2), then the last, then the first.
  std::vector<int> order;
  for (int s = 1; s + 1 < stages; ++s) order.push_back(s);
  if (stages > 1) order.push_back(stages - 1);
  order.push_back(0);
  for (size_t i = 0; extra > 0; i = (i + 1) % order.size(), --extra) counts[order[i]]++;
  return counts;
}

ModelShard make_shard(const ModelConfig& c, int tp, int tp_rank, bool sp, int pp, int pp_rank,
                      int vpp, int64_t rows, const std::vector<int64_t>& stage_layers) {
  STRATA_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp, "parallel.tp: bad tensor-parallel rank");
  STRATA_CHECK(c.n_head % tp == 0, "parallel.tp = ", tp,
               " does not divide model.n_head = ", c.n_head,
               "; tensor parallelism splits attention by heads, so choose tp from the "
               "divisors of n_head");
  const int64_t kv = c.kv_heads();
  STRATA_CHECK(kv % tp == 0 || tp % kv == 0, "parallel.tp = ", tp,
               " cannot split model.n_kv_head = ", kv,
               ": kv heads are split when n_kv_head is a multiple of tp, or replicated when tp "
               "is a multiple of n_kv_head; neither holds");
  STRATA_CHECK(c.d_ff % tp == 0, "parallel.tp = ", tp,
               " does not divide the MLP width d_ff = ", c.d_ff,
               "; set model.d_ff to a multiple of tp");
  STRATA_CHECK(
      c.vocab_size % tp == 0, "parallel.tp = ", tp,
      " does not divide model.vocab_size = ", c.vocab_size,
      "; the vocabulary is split into equal row blocks, so pad vocab_size to a multiple of "
      "tp");
  STRATA_CHECK(!sp || tp > 1,
               "parallel.sp = true needs parallel.tp > 1 (sequence parallelism "
               "shards what tensor parallelism replicates)");
  STRATA_CHECK(!sp || rows % tp == 0, "parallel.sp: a micro-batch of ", rows,
               " tokens (train.batch_size * train.seq_len) does not split into tp = ", tp,
               " equal sequence shards");
  STRATA_CHECK(pp >= 1 && pp_rank >= 0 && pp_rank < pp, "parallel.pp: bad pipeline rank");
  STRATA_CHECK(vpp >= 1, "parallel.vpp: must be at least 1, got ", vpp);
  const int stages = pp * vpp;
  const std::vector<int64_t> counts = stage_layer_counts(c.n_layer, stages, stage_layers);
  std::vector<int64_t> starts(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), starts.begin() + 1);
  ModelShard s;
  s.tp = tp;
  s.tp_rank = tp_rank;
  s.sp = sp;
  s.pp = pp;
  s.pp_rank = pp_rank;
  s.vpp = vpp;
  s.chunks.clear();
  for (int chunk = 0; chunk < vpp; ++chunk) {
    const int g = pp_rank + chunk * pp;
    s.chunks.push_back({starts[g], starts[g + 1]});
  }
  s.has_embedding = pp_rank == 0;
  s.has_head = pp_rank == pp - 1;
  return s;
}

}  // namespace strata
