#include "plan/collectives.h"

#include <algorithm>
#include <cmath>

namespace strata {

GroupPlacement place_group(int64_t ranks, int64_t stride, int64_t gpus_per_node) {
  GroupPlacement g;
  g.ranks = std::max<int64_t>(1, ranks);
  const int64_t s = std::max<int64_t>(1, stride), gpn = std::max<int64_t>(1, gpus_per_node);
  g.ranks_per_node = s >= gpn ? 1 : std::min(g.ranks, std::max<int64_t>(1, gpn / s));
  g.nodes = (g.ranks + g.ranks_per_node - 1) / g.ranks_per_node;
  return g;
}

double ring_all_reduce_s(int64_t n, double bytes, double bw, double alpha) {
  if (n <= 1) return 0;
  const double nn = static_cast<double>(n);
  return 2.0 * (nn - 1) / nn * bytes / bw + 2.0 * (nn - 1) * alpha;
}

double tree_all_reduce_s(double steps, double bytes, double bw, double alpha) {
  return 2.0 * bytes / bw + 2.0 * steps * alpha;
}

double ring_gather_s(int64_t n, double bytes, double bw, double alpha) {
  if (n <= 1) return 0;
  const double nn = static_cast<double>(n);
  return (nn - 1) / nn * bytes / bw + (nn - 1) * alpha;
}

double send_s(double bytes, double bw, double alpha) {
  return bytes / bw + alpha;
}

double all_to_all_s(int64_t n, int64_t k, double bytes, double bw_intra, double bw_inter,
                    double alpha) {
  if (n <= 1) return 0;
  const double nn = static_cast<double>(n), kk = static_cast<double>(std::clamp<int64_t>(k, 1, n));
  const double local = (kk - 1) / nn * bytes / bw_intra;
  const double remote = kk < nn ? (nn - kk) / nn * bytes / bw_inter : 0.0;
  return std::max(local, remote) + (nn - 1) * alpha;
}

CollectiveCost ring_exchange_cost(double bytes, int64_t ranks, int64_t stride,
                                  const ClusterProfile& cluster) {
  CollectiveCost c;
  if (bytes <= 0 || ranks <= 1) return c;
  c.inter_node = place_group(ranks, stride, cluster.gpus_per_node).spans_nodes();
  const LinkProfile& l = c.inter_node ? cluster.inter : cluster.intra;
  c.bandwidth = l.op_bandwidth(CollectiveOp::send);
  c.latency_s = l.op_latency(CollectiveOp::send);
  c.seconds = send_s(bytes, c.bandwidth, c.latency_s);
  c.algorithm = "p2p";
  return c;
}

CollectiveCost collective_cost(CollectiveOp op, double bytes, int64_t ranks, int64_t stride,
                               const ClusterProfile& cluster) {
  CollectiveCost c;
  if (bytes <= 0) return c;
  if (op == CollectiveOp::send) {
    // A send goes to the neighbour `stride` ranks away: the same node when stride < G.
    c.inter_node = stride >= cluster.gpus_per_node;
    const LinkProfile& l = c.inter_node ? cluster.inter : cluster.intra;
    c.bandwidth = l.op_bandwidth(op);
    c.latency_s = l.op_latency(op);
    c.seconds = send_s(bytes, c.bandwidth, c.latency_s);
    c.algorithm = "p2p";
    return c;
  }
  if (ranks <= 1) return c;
  const GroupPlacement g = place_group(ranks, stride, cluster.gpus_per_node);
  const int64_t n = g.ranks;
  c.inter_node = g.spans_nodes();
  if (op == CollectiveOp::all_to_all) {
    // Every rank sends a block to every other at once (NCCL's grouped sends, MPI's pairwise
    // exchange): the intra-node share on the node's link, the rest on this rank's network card.
    const double intra = cluster.intra.op_bandwidth(op);
    const double inter = c.inter_node ? cluster.inter.op_bandwidth(op) : intra;
    c.bandwidth = c.inter_node ? inter : intra;
    c.latency_s = c.inter_node ? cluster.inter.op_latency(op) : cluster.intra.op_latency(op);
    c.seconds = all_to_all_s(n, g.ranks_per_node, bytes, intra, inter, c.latency_s);
    c.algorithm = "pairwise";
    return c;
  }
  if (!c.inter_node) {
    c.bandwidth = cluster.intra.op_bandwidth(op);
    c.latency_s = cluster.intra.op_latency(op);
  } else {
    const double k = static_cast<double>(g.ranks_per_node);
    c.bandwidth = k > 1
                      ? std::min(cluster.intra.op_bandwidth(op), k * cluster.inter.op_bandwidth(op))
                      : cluster.inter.op_bandwidth(op);
    c.latency_s = cluster.inter.op_latency(op);
  }
  c.algorithm = "ring";
  if (op == CollectiveOp::all_reduce) {
    c.seconds = ring_all_reduce_s(n, bytes, c.bandwidth, c.latency_s);
    if (c.inter_node) {
      // Double binary tree across nodes, a chain inside each: depth log2(nodes) network hops
      // plus k - 1 intra-node hops, each direction.
      const double alpha_intra = cluster.intra.op_latency(op);
      const double depth_s = std::ceil(std::log2(static_cast<double>(g.nodes))) * c.latency_s +
                             static_cast<double>(g.ranks_per_node - 1) * alpha_intra;
      const double tree = tree_all_reduce_s(1.0, bytes, c.bandwidth, depth_s);
      if (tree < c.seconds) {
        c.seconds = tree;
        c.algorithm = "tree";
      }
    }
    return c;
  }
  c.seconds = ring_gather_s(n, bytes, c.bandwidth, c.latency_s);
  if (c.inter_node && g.ranks_per_node == 1) {
    // PAT (NCCL 2.23+, one GPU per node): log2(n) steps, the same bytes.
    const double nn = static_cast<double>(n);
    const double pat = (nn - 1) / nn * bytes / c.bandwidth + std::ceil(std::log2(nn)) * c.latency_s;
    if (pat < c.seconds) {
      c.seconds = pat;
      c.algorithm = "pat";
    }
  }
  return c;
}

}  // namespace strata
