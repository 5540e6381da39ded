#include "parallel/model_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/trace.h"

namespace strata {

ParamStore whole_model_layout(const ModelConfig& config) {
  ModelConfig c = config;
  c.finalize();
  ParamStore store;
  register_model_params(c, ModelShard::whole(c), store);
  store.plan_layout();
  return store;
}

ModelParallel::ModelParallel(ProcessGroups& groups, const ModelConfig& config,
                             const ShardSpec& spec, Decoder& model, DataParallel& dp, Arena& arena)
    : groups_(groups),
      config_(model.config()),
      spec_(spec),
      model_(model),
      dp_(dp),
      whole_(whole_model_layout(config)) {
  const ParamStore& p = model.params();
  for (int i = 0; i < p.count(); ++i) {
    const TensorSlice& s = p.info(i).slice;
    if (!s.sum_grads) continue;
    if (s.replicated) {
      tp_summed_.push_back(i);
      tp_summed_elems_ += p.info(i).numel;
    } else {
      kv_summed_.push_back(i);
      kv_summed_elems_ += p.info(i).numel;
    }
  }
  const int64_t pack = std::max(tp_summed_elems_, kv_summed_elems_);
  if (pack > 0) pack_ = arena.alloc<float>(MemCategory::comm, pack, "tensor-parallel grad pack");
  if (kv_summed_elems_ > 0)
    gathered_ = arena.alloc<float>(MemCategory::comm, kv_summed_elems_ * groups.tp().size(),
                                   "shared kv gradients");
  norm_bits_.resize(static_cast<size_t>(
      2 * std::max({groups.dp().size(), groups.tp().size(), groups.pp().size()})));
  const ModelShard& sh = model.shard();
  if (config_.tie_embeddings && sh.pp > 1 && (sh.has_embedding || sh.has_head)) {
    tied_copy_ = sh.has_embedding ? model.index().embed : model.index().head;
    tied_peer_ = arena.alloc<float>(MemCategory::comm, p.info(tied_copy_).numel,
                                    "tied embedding gradient of the other stage");
  }
}

namespace {
// Packs (or unpacks) the held gradient spans of `indices` into one contiguous buffer, on the
// device of both.
template <bool kPack>
int64_t pack_spans(Backend& backend, const DataParallel& dp, const std::vector<int>& indices,
                   float* buf) {
  int64_t at = 0;
  for (int i : indices)
    for (const GradSpan& s : dp.grad_spans(i)) {
      if (kPack)
        backend.copy(buf + at, s.grad, static_cast<size_t>(s.count) * sizeof(float));
      else
        backend.copy(s.grad, buf + at, static_cast<size_t>(s.count) * sizeof(float));
      at += s.count;
    }
  return at;
}
}  // namespace

void ModelParallel::finish_gradients() {
  const TraceSpan span("tp/pp grad sums", "comm_wait");
  Comm& tp = groups_.tp();
  Backend& backend = model_.backend();
  if (!tp_summed_.empty()) {
    const int64_t n = pack_spans<true>(backend, dp_, tp_summed_, pack_);
    tp.all_reduce(pack_, n, DType::f32, ReduceOp::sum)->wait();
    pack_spans<false>(backend, dp_, tp_summed_, pack_);
  }
  if (!kv_summed_.empty()) {
    // Each kv head is shared by `holders` adjacent tp ranks: gather everyone's partial sums and
    // add those of the ranks sharing this rank's head, in rank order (the same on each of them).
    const int holders = model_.params().info(kv_summed_.front()).slice.holders;
    const int64_t n = pack_spans<true>(backend, dp_, kv_summed_, pack_);
    tp.all_gather(pack_, gathered_, n, DType::f32)->wait();
    const int first = tp.rank() / holders * holders;
    backend.copy(pack_, gathered_ + first * n, static_cast<size_t>(n) * sizeof(float));
    for (int r = first + 1; r < first + holders; ++r)
      backend.add_inplace(pack_, gathered_ + r * n, n);
    pack_spans<false>(backend, dp_, kv_summed_, pack_);
  }
  if (tied_copy_ >= 0) {
    // The first and last pipeline stages swap their tied-embedding gradients and both add: a + b
    // is the same float on both sides, so the two copies stay bitwise equal.
    Comm& pp = groups_.pp();
    const int peer = model_.shard().has_embedding ? pp.size() - 1 : 0;
    const int64_t n = model_.params().info(tied_copy_).numel;
    float* mine = model_.params().grad(tied_copy_);
    auto recv = pp.recv(tied_peer_, n, DType::f32, peer, 32000);
    auto send = pp.send(mine, n, DType::f32, peer, 32000);
    recv->wait();
    send->wait();
    backend.add_inplace(mine, tied_peer_, n);
  }
}

namespace {
// Sums one double per rank exactly and in rank order: the bits travel as two int32 (`all` has
// room for 2 * comm.size(), allocated once).
double sum_exactly(Comm& comm, double value, std::vector<int32_t>& all) {
  if (comm.size() == 1) return value;
  int32_t mine[2];
  std::memcpy(mine, &value, sizeof(double));
  comm.all_gather(mine, all.data(), 2, DType::i32)->wait();
  double total = 0;
  for (int r = 0; r < comm.size(); ++r) {
    double v;
    std::memcpy(&v, &all[2 * r], sizeof(double));
    total += v;
  }
  return total;
}
}  // namespace

double ModelParallel::grad_norm() {
  const ParamStore& p = model_.params();
  double dense = 0, experts = 0;
  for (int i = 0; i < p.count(); ++i) {
    const TensorSlice& s = p.info(i).slice;
    if (s.holder_index != 0 || s.stage_copy) continue;  // counted by another rank
    for (const GradSpan& span : dp_.grad_spans(i))
      (s.expert ? experts : dense) += model_.backend().sum_squares(span.grad, span.count);
  }
  // Sharded gradients: the dp group's shards hold every element once (the experts' shards
  // split over the expert-data-parallel groups of all ep ranks). Otherwise every dp rank holds
  // all of them, except the experts, which differ over the ep group.
  double local = 0;
  if (dp_.zero_stage() >= 2)
    local = sum_exactly(groups_.dp(), dense + experts, norm_bits_);
  else
    local = dense + sum_exactly(groups_.ep(), experts, norm_bits_);
  local = sum_exactly(groups_.tp(), local, norm_bits_);
  local = sum_exactly(groups_.pp(), local, norm_bits_);
  return std::sqrt(local);
}

void ModelParallel::gather(const float* local, float* whole) {
  Comm& world = groups_.world();
  const Layout& layout = groups_.layout();
  const Layout::Coord me = groups_.coord();
  // Data-parallel rank d < ep sends its experts (ep rank d's); rank 0 also everything else.
  auto counted = [](const ParamInfo& info, int dp_rank) {
    return info.slice.holder_index == 0 && !info.slice.stage_copy &&
           (dp_rank == 0 || info.slice.expert);
  };
  if (world.rank() != 0) {
    if (me.dp >= layout.ep) return;
    const ParamStore& p = model_.params();
    std::vector<float> packed;
    for (const ParamInfo& info : p.all())
      if (counted(info, me.dp))
        packed.insert(packed.end(), local + info.offset, local + info.offset + info.numel);
    world.send(packed.data(), static_cast<int64_t>(packed.size()), DType::f32, 0, 7)->wait();
    return;
  }
  for (int pp = 0; pp < layout.pp; ++pp) {
    for (int tp = 0; tp < layout.tp; ++tp) {
      for (int d = 0; d < layout.ep; ++d) {
        const int src = layout.rank_of({tp, d, pp});
        const float* data = local;
        ParamStore theirs;
        std::vector<float> packed;
        if (src == 0) {
          theirs = model_.params();
        } else {
          register_model_params(config_, spec_.for_rank(config_, tp, pp, d), theirs);
          int64_t n = 0;
          for (const ParamInfo& info : theirs.all()) n += counted(info, d) ? info.numel : 0;
          packed.resize(static_cast<size_t>(n));
          world.recv(packed.data(), n, DType::f32, src, 7)->wait();
          data = packed.data();
        }
        int64_t at = 0;
        for (const ParamInfo& info : theirs.all()) {
          if (!counted(info, d)) continue;
          const float* block = src == 0 ? data + info.offset : data + at;
          at += info.numel;
          copy_local_to_global(info, block, whole + whole_.info(whole_.index_of(info.name)).offset);
        }
      }
    }
  }
}

void ModelParallel::scatter(const float* whole, float* local) const {
  for (const ParamInfo& info : model_.params().all())
    copy_global_to_local(info, whole + whole_.info(whole_.index_of(info.name)).offset,
                         local + info.offset);
}

}  // namespace strata
