#include "comm/link_probe.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"

namespace strata {

namespace {

// Tags of the probe's messages, apart from every other send/recv on the same communicator.
constexpr int kHandshakeTag = 7301;
constexpr int kPayloadTag = 7302;

}  // namespace

int probe_rounds(int n) {
  if (n < 2) return 0;
  return n % 2 == 0 ? n - 1 : n;
}

int probe_partner(int rank, int n, int round) {
  STRATA_CHECK(rank >= 0 && rank < n && round >= 0 && round < probe_rounds(n),
               "probe_partner: rank ", rank, " of ", n, ", round ", round);
  // An odd n plays as n + 1 with a phantom rank n: its partner sits out.
  const int m = n % 2 == 0 ? n : n + 1;
  const int ring = m - 1;  // ranks 0..m-2 rotate; rank m-1 stays in place
  int partner = 0;
  if (rank == m - 1) {
    // The rotating rank i with 2i = round (mod ring); ring is odd, so i = round * (m / 2).
    partner = static_cast<int>((static_cast<int64_t>(round) * (m / 2)) % ring);
  } else {
    const int j = ((round - rank) % ring + ring) % ring;
    partner = j == rank ? m - 1 : j;
  }
  return partner < n ? partner : -1;
}

std::vector<float> probe_links(Comm& comm, int64_t bytes) {
  const int n = comm.size(), me = comm.rank();
  std::vector<float> seconds(static_cast<size_t>(n), 0.0f);
  const int64_t count = std::max<int64_t>(1, bytes / 4);
  std::vector<float> out(static_cast<size_t>(count), 1.0f), in(static_cast<size_t>(count));
  for (int round = 0; round < probe_rounds(n); ++round) {
    const int peer = probe_partner(me, n, round);
    if (peer < 0) continue;
    float hello = 0, reply = 0;
    double best = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      wait_all({comm.send(&hello, 1, DType::f32, peer, kHandshakeTag),
                comm.recv(&reply, 1, DType::f32, peer, kHandshakeTag)});
      const Clock::time_point t0 = Clock::now();
      wait_all({comm.send(out.data(), count, DType::f32, peer, kPayloadTag),
                comm.recv(in.data(), count, DType::f32, peer, kPayloadTag)});
      best = std::min(best, seconds_since(t0));
    }
    seconds[static_cast<size_t>(peer)] = static_cast<float>(best);
  }
  return seconds;
}

std::vector<float> link_scores(const std::vector<float>& matrix, int n) {
  STRATA_CHECK(static_cast<int64_t>(matrix.size()) == static_cast<int64_t>(n) * n,
               "link_scores: a ", n, " x ", n, " matrix has ", n * n, " entries, not ",
               matrix.size());
  std::vector<float> scores(static_cast<size_t>(n), 0.0f);
  for (int i = 0; i < n && n > 1; ++i) {
    std::vector<float> row;
    for (int j = 0; j < n; ++j)
      if (j != i) row.push_back(matrix[static_cast<size_t>(i) * n + j]);
    std::sort(row.begin(), row.end());
    scores[static_cast<size_t>(i)] = row[(row.size() - 1) / 2];
  }
  return scores;
}

}  // namespace strata
