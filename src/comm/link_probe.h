// Link probes: which ranks sit behind a slow network link. A slow link slows every rank of a
// collective alike (a ring all-reduce runs at the pace of its slowest hop), so step times cannot
// name it; timing one exchange between every pair of ranks can. A rank whose exchanges with most
// of its peers are slow is behind the slow link (its host's NIC, cable or switch port), while the
// other ranks see it in only the exchanges with that host. It takes three hosts to tell which
// end of a slow pair is at fault: with two, every cross-host pair crosses both hosts' links.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/comm.h"

namespace strata {

// The round-robin tournament the probe runs (the circle method): n - 1 rounds for an even n
// (n for an odd n, each with one rank sitting out), in which every rank meets one partner, so
// that each exchange is timed with both ends free of any other transfer. Returns the partner of
// `rank` in `round`, or -1 when it sits out.
int probe_rounds(int n);
int probe_partner(int rank, int n, int round);

// Collective over `comm` (host buffers): `bytes` each way between every pair of ranks. Returns
// this rank's seconds per peer (its own entry 0). Each exchange starts with a one-element
// handshake, so both partners start the clock together (a partner still busy in an earlier slow
// round would otherwise be billed to this one), and the faster of two timed exchanges counts
// (the first may include opening the connection).
std::vector<float> probe_links(Comm& comm, int64_t bytes);

// Each rank's link time: the lower median of its exchange times with its peers, from the n x n
// matrix of probe_links rows (row i is rank i's; the diagonal is ignored).
std::vector<float> link_scores(const std::vector<float>& matrix, int n);

}  // namespace strata
