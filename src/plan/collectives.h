// The alpha-beta cost of collectives over a cluster's tiers, as NCCL runs them: ring and
// (double binary) tree all-reduce, ring (or PAT) reduce-scatter and all-gather, point-to-point
// send, pairwise all-to-all, whichever is faster. `bytes` is the whole buffer: all_reduce's
// buffer, reduce_scatter's input (all n blocks), all_gather's output (all n blocks), the message
// of a send, all_to_all's send buffer of one rank (all n blocks, its own included).
//
// Placement: ranks are numbered Megatron's way (tp fastest, then dp, then pp; comm/layout.h), so a
// group is n ranks at a fixed world-rank stride (tp: 1, dp: tp, pp: tp * dp). With G GPUs per
// node, k = min(n, G / stride) of its ranks share a node (1 when stride >= G). A group on one node
// uses the intra-node link. A group across nodes is a hierarchical ring: every step crosses the
// network, each node's k ranks share their k network cards, so the bus bandwidth is
// min(intra, k * inter) per rank, and a step costs the network latency. An all-to-all is not a
// ring: each rank sends (k - 1)/n of its buffer to the ranks of its node over the intra-node link
// and (n - k)/n to the others through its own network card, both at once.
#pragma once
#include <cstdint>

#include "plan/cluster_profile.h"

namespace strata {

struct GroupPlacement {
  int64_t ranks = 1;           // n
  int64_t ranks_per_node = 1;  // k
  int64_t nodes = 1;
  bool spans_nodes() const { return nodes > 1; }
};
GroupPlacement place_group(int64_t ranks, int64_t stride, int64_t gpus_per_node);

struct CollectiveCost {
  double seconds = 0;
  const char* algorithm = "none";  // "ring", "tree", "pat", "p2p", "none" (n = 1 or 0 bytes)
  double bandwidth = 0;            // bus bandwidth used, bytes/s
  double latency_s = 0;            // per algorithm step
  bool inter_node = false;
};

// The pure formulas (tests check them exactly), n ranks, bus bandwidth bw, latency alpha a step:
//   ring all-reduce       2(n-1)/n * bytes/bw + 2(n-1) * alpha
//   tree all-reduce       2 * bytes/bw + 2 * steps * alpha  (steps: the tree's depth in hops)
//   ring reduce-scatter / all-gather  (n-1)/n * bytes/bw + (n-1) * alpha
//   send                  bytes/bw + alpha
//   pairwise all-to-all   max((k-1)/n * bytes/bw_intra, (n-k)/n * bytes/bw_inter) + (n-1) * alpha
//                         (k of the n ranks on each node; one node, k = n: the ring formula of
//                         reduce-scatter)
double ring_all_reduce_s(int64_t n, double bytes, double bw, double alpha);
double tree_all_reduce_s(double steps, double bytes, double bw, double alpha);
double ring_gather_s(int64_t n, double bytes, double bw, double alpha);
double send_s(double bytes, double bw, double alpha);
double all_to_all_s(int64_t n, int64_t k, double bytes, double bw_intra, double bw_inter,
                    double alpha);

// A ring exchange (ring attention's step): every rank of a group of `ranks` at `stride` sends
// `bytes` to the next one, all at once. The slowest hop sets the time: once the group spans nodes
// some hop crosses the network (each rank through its own network card), otherwise every hop is
// on the intra-node link. Zero for one rank.
CollectiveCost ring_exchange_cost(double bytes, int64_t ranks, int64_t stride,
                                  const ClusterProfile& cluster);

// The faster algorithm for `op` over a group of `ranks` at `stride` on `cluster`.
CollectiveCost collective_cost(CollectiveOp op, double bytes, int64_t ranks, int64_t stride,
                               const ClusterProfile& cluster);
inline double collective_time(CollectiveOp op, double bytes, int64_t ranks, int64_t stride,
                              const ClusterProfile& cluster) {
  return collective_cost(op, bytes, ranks, stride, cluster).seconds;
}

}  // namespace strata
