// HostOffloadAdamW on the CPU backend: bitwise equal to AdamW (params, moments, master, the bf16
// copies) for any chunking and any pattern of early gradient downloads, state held in its host
// arena only, a discarded step's downloads not used, and checkpoint round trips.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "optim/adamw.h"
#include "optim/host_offload.h"
#include "segment_problem.h"

namespace strata {
namespace {

using testing::kSpecs;
using testing::kStateSize;
using testing::lr_at;
using testing::Problem;
using testing::same_bits;
using testing::test_config;

constexpr int64_t kPayload = 5958;  // elements of kSpecs' segments (the rest is padding)

struct State {
  std::vector<float> master, m, v;
  static State of(const HostOffloadAdamW& opt) {
    State s;
    const auto n = static_cast<size_t>(opt.state_size());
    s.master.resize(n), s.m.resize(n), s.v.resize(n);
    opt.read_state(s.master.data(), s.m.data(), s.v.data());
    return s;
  }
};

// The reference's params, moments and master against the offloaded optimizer's.
void expect_same(const HostOffloadAdamW& off, const Problem& off_problem, const AdamW& ref,
                 const Problem& ref_problem, const std::string& what) {
  const State s = State::of(off);
  EXPECT_TRUE(same_bits(s.m.data(), ref.first_moment(), kStateSize, "exp_avg")) << what;
  EXPECT_TRUE(same_bits(s.v.data(), ref.second_moment(), kStateSize, "exp_avg_sq")) << what;
  EXPECT_TRUE(off_problem.same_params(ref_problem)) << what;
  for (size_t i = 0; i < kSpecs.size(); ++i)
    EXPECT_TRUE(same_bits(s.master.data() + kSpecs[i].offset, ref_problem.params[i].data(),
                          kSpecs[i].count, "master"))
        << what << ", segment " << i;
}

// How a step's gradients reach the host: all in step(), or partly during "backward" (ranges
// that split chunks, in descending order as backward finishes groups), or all of them early.
enum class Early { none, some, all };

class HostOffloadEquality : public ::testing::TestWithParam<int64_t> {};

TEST_P(HostOffloadEquality, BitwiseEqualToAdamW) {
  const int64_t chunk = GetParam();
  const OptimConfig config = test_config();
  for (bool bf16 : {false, true}) {
    Arena arena;
    Problem ref_problem(1), off_problem(1);
    // bf16 working copies for every other segment: the copies are written where they exist.
    std::vector<std::vector<uint16_t>> ref_lp(kSpecs.size()), off_lp(kSpecs.size());
    std::vector<OptimSegment> ref_segments = ref_problem.segments();
    std::vector<OptimSegment> off_segments = off_problem.segments();
    for (size_t i = 0; bf16 && i < kSpecs.size(); i += 2) {
      ref_lp[i].assign(static_cast<size_t>(kSpecs[i].count), 0);
      off_lp[i].assign(static_cast<size_t>(kSpecs[i].count), 0);
      ref_segments[i].param_bf16 = ref_lp[i].data();
      off_segments[i].param_bf16 = off_lp[i].data();
    }
    AdamW ref(ref_segments, kStateSize, arena, config);
    HostOffloadAdamW off(off_segments, kStateSize, config, cpu_backend(), {chunk});
    EXPECT_EQ(arena.stats().total_current, 8 * kStateSize) << "only the reference's moments";
    int step = 0;
    for (Early early : {Early::none, Early::some, Early::all, Early::none}) {
      const std::string what = "chunk " + std::to_string(chunk) + (bf16 ? " bf16" : " f32") +
                               ", step " + std::to_string(step + 1);
      ref_problem.fill_grads(10 + static_cast<uint32_t>(step));
      off_problem.fill_grads(10 + static_cast<uint32_t>(step));
      if (early == Early::some) {
        off.download_grads(4000, 6150);
        off.download_grads(1000, 2599);
      } else if (early == Early::all) {
        for (int64_t end = kStateSize; end > 0; end -= 1000) off.download_grads(end - 1000, end);
      }
      const float scale = step == 1 ? 0.5f : 1.0f;  // a clipped step
      ref.step(lr_at(step), scale);
      off.step(lr_at(step), scale);
      ++step;
      expect_same(off, off_problem, ref, ref_problem, what);
      for (size_t i = 0; i < kSpecs.size(); ++i) EXPECT_EQ(off_lp[i], ref_lp[i]) << what;
    }
    EXPECT_EQ(off.steps_taken(), 4);
    // Every segment element's new value once, and its bf16 copy where it has one (segments 0, 2,
    // 4 and 6: 2500 + 1500 + 0 + 900 elements).
    EXPECT_EQ(off.last_upload_bytes(), 4 * kPayload + (bf16 ? 2 * 4900 : 0));
  }
}

INSTANTIATE_TEST_SUITE_P(Chunks, HostOffloadEquality,
                         ::testing::Values(int64_t{1} << 20, 1000, 333, 7));

// The state (master, both moments, the downloaded gradients, the bf16 staging when a segment has
// a copy) lives in the optimizer's host arena, by category; nothing in the caller's arena.
TEST(HostOffload, StateIsInItsHostArena) {
  Problem problem(1);
  std::vector<OptimSegment> segments = problem.segments();
  std::vector<uint16_t> lp(static_cast<size_t>(kSpecs[0].count));
  segments[0].param_bf16 = lp.data();
  HostOffloadAdamW off(segments, kStateSize, test_config(), cpu_backend(), {1000});
  const Arena& host = off.host_arena();
  EXPECT_EQ(host.current(MemCategory::master), 4 * kStateSize);
  EXPECT_EQ(host.current(MemCategory::optimizer), 8 * kStateSize);
  EXPECT_EQ(host.current(MemCategory::grads), 4 * kStateSize);
  EXPECT_EQ(host.current(MemCategory::params), 2 * kStateSize);
  EXPECT_EQ(off.num_chunks(), 7);
  // The master starts as the params.
  const State s = State::of(off);
  for (size_t i = 0; i < kSpecs.size(); ++i)
    EXPECT_TRUE(same_bits(s.master.data() + kSpecs[i].offset, problem.params[i].data(),
                          kSpecs[i].count, "initial master"));
}

// A step whose update is skipped downloaded gradients during backward; after discard_gradients the
// next step uses its own gradients, not those.
TEST(HostOffload, DiscardedDownloadsAreNotUsed) {
  const OptimConfig config = test_config();
  Arena arena;
  Problem ref_problem(1), off_problem(1);
  AdamW ref(ref_problem.segments(), kStateSize, arena, config);
  HostOffloadAdamW off(off_problem.segments(), kStateSize, config, cpu_backend(), {500});
  off_problem.fill_grads(99);
  off.download_grads(0, kStateSize);  // the skipped step's gradients
  off.discard_gradients();
  ref_problem.fill_grads(5);
  off_problem.fill_grads(5);
  off.download_grads(0, 1000);  // part of the next step's, early
  ref.step(lr_at(0), 1.0f);
  off.step(lr_at(0), 1.0f);
  expect_same(off, off_problem, ref, ref_problem, "after a discarded step");
  EXPECT_EQ(off.last_download_bytes(), 4 * kPayload);  // each segment element once
}

// Checkpoints: the state read from one optimizer and written into a fresh one continues exactly;
// write_state also puts the master values into the params.
TEST(HostOffload, CheckpointRoundTrip) {
  const OptimConfig config = test_config();
  Problem a_problem(1), b_problem(2);
  HostOffloadAdamW a(a_problem.segments(), kStateSize, config, cpu_backend(), {700});
  HostOffloadAdamW b(b_problem.segments(), kStateSize, config, cpu_backend(), {300});
  for (int step = 0; step < 2; ++step) {
    a_problem.fill_grads(20 + static_cast<uint32_t>(step));
    a.step(lr_at(step), 1.0f);
  }
  const State saved = State::of(a);
  b.write_state(saved.master.data(), saved.m.data(), saved.v.data());
  b.set_steps_taken(a.steps_taken());
  EXPECT_TRUE(b_problem.same_params(a_problem)) << "params set from the master";
  a_problem.fill_grads(30);
  b_problem.fill_grads(30);
  a.step(lr_at(2), 1.0f);
  b.step(lr_at(2), 1.0f);
  EXPECT_TRUE(b_problem.same_params(a_problem));
  const State sa = State::of(a), sb = State::of(b);
  EXPECT_TRUE(same_bits(sa.m.data(), sb.m.data(), kStateSize, "exp_avg"));
  EXPECT_TRUE(same_bits(sa.v.data(), sb.v.data(), kStateSize, "exp_avg_sq"));
  EXPECT_TRUE(same_bits(sa.master.data(), sb.master.data(), kStateSize, "master"));
}

TEST(HostOffload, RejectsOverlappingSegments) {
  Problem problem(1);
  std::vector<OptimSegment> segments = problem.segments();
  segments[1].count = 800;  // [0, 800) runs into the segment at 717
  try {
    HostOffloadAdamW off(segments, kStateSize, test_config(), cpu_backend());
    FAIL() << "overlapping segments accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("optimizer offload (cpu): segments overlap at state offset 717"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
