#include "comm/layout.h"

#include "core/error.h"

namespace strata {

namespace {

// "1, 2, 3 or 6"
std::string divisors_text(int n) {
  std::string out;
  int last = 0;
  for (int d = 1; d <= n; ++d) {
    if (n % d) continue;
    if (last) out += cat(out.empty() ? "" : ", ", last);
    last = d;
  }
  return out.empty() ? cat(last) : cat(out, " or ", last);
}

}  // namespace

Layout::Coord Layout::coord(int world_rank) const {
  STRATA_CHECK(world_rank >= 0 && world_rank < world(), "layout ", describe(), ": world rank ",
               world_rank, " is outside 0..", world() - 1);
  Coord c;
  c.tp = world_rank % tp;
  c.dp = (world_rank / tp) % dp;
  c.pp = world_rank / (tp * dp);
  return c;
}

int Layout::rank_of(Coord c) const {
  STRATA_CHECK(c.tp >= 0 && c.tp < tp && c.dp >= 0 && c.dp < dp && c.pp >= 0 && c.pp < pp,
               "layout ", describe(), ": coordinate (tp ", c.tp, ", dp ", c.dp, ", pp ", c.pp,
               ") is outside it");
  return c.pp * (dp * tp) + c.dp * tp + c.tp;
}

std::string Layout::describe() const {
  return cat("tp=", tp, " pp=", pp, " dp=", dp, ep > 1 ? cat(" ep=", ep) : std::string(),
             cp > 1 ? cat(" cp=", cp) : std::string(), " zero=", zero, " (world ", world(), ")");
}

Layout resolve_layout(int tp, int pp, int dp, int zero, int world_size, int ep, int cp) {
  STRATA_CHECK(world_size >= 1, "parallel layout: world size ", world_size, " must be >= 1");
  STRATA_CHECK(tp >= 1, "parallel.tp must be >= 1 (got ", tp, ")");
  STRATA_CHECK(pp >= 1, "parallel.pp must be >= 1 (got ", pp, ")");
  STRATA_CHECK(dp >= 0, "parallel.dp must be >= 1, or 0 to derive it from the world size (got ", dp,
               ")");
  STRATA_CHECK(zero >= 0 && zero <= 3, "parallel.zero must be 0, 1, 2 or 3 (got ", zero, ")");
  const int model = tp * pp;
  if (world_size % model != 0) {
    const std::string hint =
        world_size % pp == 0
            ? cat("with parallel.pp=", pp, ", parallel.tp can be ", divisors_text(world_size / pp))
            : cat("parallel.pp must divide it: ", divisors_text(world_size));
    fail("parallel.tp=", tp, " x parallel.pp=", pp, " = ", model,
         " ranks per model replica does not divide the world size ", world_size, "; ", hint);
  }
  const int fitting_dp = world_size / model;
  if (dp == 0) dp = fitting_dp;
  if (model * dp != world_size) {
    fail("parallel.tp=", tp, " x parallel.pp=", pp, " x parallel.dp=", dp, " = ", model * dp,
         " ranks, but the world size is ", world_size, "; set parallel.dp=", fitting_dp,
         " (or 0 to derive it from the world size)");
  }
  STRATA_CHECK(ep >= 1, "parallel.ep must be >= 1 (got ", ep, ")");
  if (dp % ep != 0)
    fail("parallel.ep=", ep, " does not divide the data-parallel size ", dp,
         ": expert parallelism is carved out of data parallelism (tp=", tp, " x pp=", pp,
         " leaves dp=", dp, " of world ", world_size, "); parallel.ep can be ", divisors_text(dp));
  STRATA_CHECK(cp >= 1, "parallel.cp must be >= 1 (got ", cp, ")");
  if (dp % cp != 0)
    fail("parallel.cp=", cp, " does not divide the data-parallel size ", dp,
         ": context parallelism is carved out of data parallelism (tp=", tp, " x pp=", pp,
         " leaves dp=", dp, " of world ", world_size, "); parallel.cp can be ", divisors_text(dp));
  Layout l;
  l.cp = cp;
  l.ep = ep;
  l.tp = tp;
  l.pp = pp;
  l.dp = dp;
  l.zero = zero;
  return l;
}

}  // namespace strata
