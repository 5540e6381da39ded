// Layout: how the world's ranks divide into tensor (tp), data (dp) and pipeline (pp) parallel
// groups, in Megatron-LM's rank order: tp fastest (the ranks of a tensor-parallel group are
// adjacent, so they share a node and its fastest links), then dp, then pp:
//   world rank = pp * (dp_size * tp_size) + dp * tp_size + tp.
// zero is the ZeRO stage (0..3) that data parallelism uses; it does not change the groups.
// ep (expert parallelism, Mixture-of-Experts models) is carved out of dp, as in Megatron-Core: the
// dp ranks of one (tp, pp) position form dp / ep expert-parallel groups of ep adjacent dp ranks
//   ep rank = dp % ep,  expert-data-parallel rank = dp / ep,
// each ep group holding every expert once, and the ranks of equal ep rank (the expert-data-
// parallel group, dp / ep of them) holding the same experts. ep does not change the world size.
// cp (context parallelism) is carved out of dp the same way, as Megatron-Core's dp x cp group: the
// dp ranks form dp / cp context-parallel groups of cp adjacent dp ranks
//   cp rank = dp % cp,  data replica = dp / cp,
// the ranks of one cp group holding different chunks of the same sequences. Gradients still
// reduce over all dp ranks (cp ranks hold the same parameters and each saw part of the tokens), so
// ZeRO, the gradient reduction and the checkpoints see one dp group whatever cp is; only the
// data loader (dp / cp replicas) and attention (the cp group) know it.
#pragma once
#include <string>

namespace strata {

struct Layout {
  int tp = 1, pp = 1, dp = 1, zero = 0, ep = 1, cp = 1;

  struct Coord {
    int tp = 0, dp = 0, pp = 0;
    bool operator==(const Coord&) const = default;
  };

  int world() const { return tp * pp * dp; }
  int edp() const { return dp / ep; }       // the expert-data-parallel size
  int replicas() const { return dp / cp; }  // data replicas: ranks that read different sequences
  Coord coord(int world_rank) const;
  int rank_of(Coord c) const;
  // "tp=2 pp=1 dp=2 zero=0 (world 4)", with " ep=2" / " cp=2" when above 1.
  std::string describe() const;
};

// Checks parallel.tp/pp/dp/zero/ep/cp against the world size; dp = 0 derives dp from it. A layout
// that does not fit is an error that names the keys, the world size, and values that would fit.
Layout resolve_layout(int tp, int pp, int dp, int zero, int world_size, int ep = 1, int cp = 1);

}  // namespace strata
