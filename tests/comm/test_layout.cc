// Local pieces of the comm layer that need no peers: Layout and resolve_layout's errors, the
// launcher environment, f16 conversions, poll policies and stats helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "comm/comm.h"
#include "comm/half.h"
#include "comm/layout.h"
#include "comm/mpi_runtime.h"
#include "comm/progress_engine.h"
#include "core/error.h"

namespace strata {
namespace {

std::string error_of(int tp, int pp, int dp, int zero, int world) {
  try {
    resolve_layout(tp, pp, dp, zero, world);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(Layout, MegatronRankOrder) {
  const Layout l = resolve_layout(2, 2, 2, 0, 8);
  // rank = pp * (dp * tp) + dp * tp + tp
  EXPECT_EQ(l.rank_of({1, 0, 0}), 1);
  EXPECT_EQ(l.rank_of({0, 1, 0}), 2);
  EXPECT_EQ(l.rank_of({0, 0, 1}), 4);
  EXPECT_EQ(l.rank_of({1, 0, 1}), 5);
  EXPECT_EQ(l.coord(6), (Layout::Coord{0, 1, 1}));
  for (const Layout& m : {resolve_layout(4, 1, 0, 0, 8), resolve_layout(1, 2, 0, 0, 8),
                          resolve_layout(2, 2, 0, 0, 8), resolve_layout(1, 1, 0, 0, 8)})
    for (int r = 0; r < 8; ++r) EXPECT_EQ(m.rank_of(m.coord(r)), r) << m.describe();
  EXPECT_EQ(l.describe(), "tp=2 pp=2 dp=2 zero=0 (world 8)");
  EXPECT_THROW(l.coord(8), Error);
  EXPECT_THROW(l.rank_of({2, 0, 0}), Error);
}

TEST(Layout, DerivesDataParallelSize) {
  EXPECT_EQ(resolve_layout(2, 1, 0, 0, 8).dp, 4);
  EXPECT_EQ(resolve_layout(2, 2, 0, 3, 8).dp, 2);
  EXPECT_EQ(resolve_layout(1, 1, 0, 0, 1).dp, 1);
  EXPECT_EQ(resolve_layout(3, 1, 2, 2, 6).zero, 2);
}

TEST(Layout, ErrorsNameTheKeysWorldAndFix) {
  const std::string tp4 = error_of(4, 1, 0, 0, 6);
  EXPECT_HAS(tp4, "parallel.tp=4");
  EXPECT_HAS(tp4, "world size 6");
  EXPECT_HAS(tp4, "parallel.tp can be 1, 2, 3 or 6");
  const std::string pp4 = error_of(1, 4, 0, 0, 6);
  EXPECT_HAS(pp4, "parallel.pp must divide it: 1, 2, 3 or 6");
  const std::string dp = error_of(2, 1, 4, 0, 6);
  EXPECT_HAS(dp, "parallel.dp=4");
  EXPECT_HAS(dp, "world size is 6");
  EXPECT_HAS(dp, "set parallel.dp=3");
  EXPECT_HAS(error_of(1, 1, 0, 4, 4), "parallel.zero must be 0, 1, 2 or 3");
  EXPECT_HAS(error_of(1, 1, 0, -1, 4), "parallel.zero");
  EXPECT_HAS(error_of(0, 1, 0, 0, 4), "parallel.tp must be >= 1");
  EXPECT_HAS(error_of(1, 0, 0, 0, 4), "parallel.pp must be >= 1");
  EXPECT_HAS(error_of(1, 1, -2, 0, 4), "parallel.dp");
  EXPECT_HAS(error_of(2, 2, 0, 0, 7), "world size 7");
}

TEST(Layout, ExpertParallelismIsCarvedOutOfDataParallelism) {
  const Layout l = resolve_layout(2, 1, 0, 0, 8, 2);
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.ep, 2);
  EXPECT_EQ(l.edp(), 2);
  EXPECT_EQ(l.world(), 8);  // ep does not add ranks
  EXPECT_EQ(l.describe(), "tp=2 pp=1 dp=4 ep=2 zero=0 (world 8)");
  std::string what;
  try {
    resolve_layout(2, 1, 0, 0, 12, 4);  // dp 6
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_HAS(what, "parallel.ep=4 does not divide the data-parallel size 6");
  EXPECT_HAS(what, "parallel.ep can be 1, 2, 3 or 6");
  EXPECT_THROW(resolve_layout(1, 1, 0, 0, 4, 0), Error);
}

// Context parallelism takes cp adjacent dp ranks per group; dp / cp data replicas remain.
TEST(Layout, ContextParallelismIsCarvedOutOfDataParallelism) {
  const Layout l = resolve_layout(2, 1, 0, 0, 8, 1, 2);
  EXPECT_EQ(l.dp, 4);
  EXPECT_EQ(l.cp, 2);
  EXPECT_EQ(l.replicas(), 2);
  EXPECT_EQ(l.world(), 8);
  EXPECT_EQ(l.describe(), "tp=2 pp=1 dp=4 cp=2 zero=0 (world 8)");
  std::string what;
  try {
    resolve_layout(1, 2, 0, 0, 12, 1, 4);  // dp 6
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_HAS(what, "parallel.cp=4 does not divide the data-parallel size 6");
  EXPECT_HAS(what, "parallel.cp can be 1, 2, 3 or 6");
  EXPECT_THROW(resolve_layout(1, 1, 0, 0, 4, 1, 0), Error);
}

const char* lookup(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

RankEnv detect(const std::map<std::string, std::string>& env) {
  return detect_rank_env([&](const char* name) { return lookup(env, name); });
}

TEST(RankEnvironment, OpenMpiSlurmPmixAndNone) {
  RankEnv e = detect({{"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"OMPI_COMM_WORLD_SIZE", "8"},
                      {"SLURM_PROCID", "0"},  // mpirun inside an allocation: Open MPI wins
                      {"PMIX_RANK", "3"}});
  EXPECT_EQ(e.launcher, Launcher::mpirun);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.world_size, 8);

  e = detect({{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "16"}});
  EXPECT_EQ(e.launcher, Launcher::srun);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.world_size, 16);

  e = detect({{"PMIX_RANK", "2"}});
  EXPECT_EQ(e.launcher, Launcher::mpirun);
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 0);

  e = detect({{"OMPI_MCA_ess", "singleton"}, {"PMIX_RANK", "0"}});
  EXPECT_EQ(e.launcher, Launcher::none);
  EXPECT_EQ(e.world_size, 1);

  e = detect({});
  EXPECT_EQ(e.launcher, Launcher::none);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);

  try {
    detect({{"SLURM_PROCID", "x1"}, {"SLURM_NTASKS", "2"}});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& err) {
    EXPECT_HAS(err.what(), "SLURM_PROCID='x1'");
  }
  EXPECT_THROW(detect({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}), Error);
}

TEST(RankEnvironment, AgreesWithMpi) {
  const RankEnv e = detect_rank_env();
  EXPECT_EQ(e.rank, mpi_world_rank());
  if (e.launcher != Launcher::none) {
    EXPECT_EQ(e.world_size, mpi_world_size());
  }
}

TEST(Half, EveryF16RoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = comm::f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(comm::f16_to_f32(comm::f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(comm::f32_to_f16(f), h) << "f16 bits " << h << " = " << f;
  }
  EXPECT_EQ(comm::f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(comm::f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(comm::f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(comm::f32_to_f16(65519.0f), 0x7bff);             // below the halfway point to 65536
  EXPECT_EQ(comm::f32_to_f16(65520.0f), 0x7c00);             // ties to even: infinity
  EXPECT_EQ(comm::f32_to_f16(1.0f + 0x1p-11f), 0x3c00);      // tie to even (down)
  EXPECT_EQ(comm::f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie to even (up)
  EXPECT_EQ(comm::f32_to_f16(0x1p-25f), 0x0000);  // half the smallest subnormal: to even (0)
  EXPECT_EQ(comm::f32_to_f16(-0x1p-24f * 1.5f), 0x8002);
}

#if defined(__F16C__)
TEST(Half, MatchesF16cOnAStrideOfAllFloats) {
  int64_t bad = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 997) {
    const uint32_t bits = static_cast<uint32_t>(u);
    float f;
    std::memcpy(&f, &bits, 4);
    // Not _cvtss_sh: clang's macro uses a compound literal, which -Wpedantic rejects in C++.
    const uint16_t hw = static_cast<uint16_t>(
        _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
    const uint16_t sw = comm::f32_to_f16(f);
    if (std::isnan(f)) {
      bad += !std::isnan(comm::f16_to_f32(sw));
    } else if (hw != sw && bad++ < 3) {
      ADD_FAILURE() << "f32 bits " << bits << ": F16C " << hw << ", software " << sw;
    }
  }
  EXPECT_EQ(bad, 0);
}
#endif

TEST(PollPolicy, ParsesAndDescribes) {
  for (const char* text : {"spin", "yield", "sleep:50", "adaptive:20:50"})
    EXPECT_EQ(comm::PollPolicy::parse(text).describe(), text);
  EXPECT_EQ(comm::PollPolicy::parse("adaptive").describe(), comm::PollPolicy{}.describe());
  EXPECT_THROW(comm::PollPolicy::parse("busy"), Error);
  EXPECT_THROW(comm::PollPolicy::parse("sleep"), Error);
  EXPECT_THROW(comm::PollPolicy::parse("sleep:-1"), Error);
  EXPECT_THROW(comm::PollPolicy::parse("adaptive:5"), Error);
}

TEST(CommStats, SumsAndSummary) {
  CommStats a, b;
  a.ops[0].calls = 2;
  a.ops[0].bytes = 100;
  b.ops[0].calls = 1;
  b.ops[0].bytes = 50;
  b.ops[2].wait_seconds = 0.5;
  a += b;
  EXPECT_EQ(a[CommOp::all_reduce].calls, 3);
  EXPECT_EQ(a.total_bytes(), 150);
  EXPECT_EQ(a.total_wait_seconds(), 0.5);
  EXPECT_HAS(a.summary(), "all_reduce 3 calls");
  EXPECT_EQ(CommStats{}.summary(), "no communication");
  for (int i = 0; i < kNumCommOps; ++i) EXPECT_STRNE(comm_op_name(static_cast<CommOp>(i)), "?");
  EXPECT_STREQ(comm_op_name(CommOp::reduce_scatter), "reduce_scatter");
}

}  // namespace
}  // namespace strata
