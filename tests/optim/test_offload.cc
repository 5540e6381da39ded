// OffloadedAdamW: bitwise equal to AdamW (params and moments) for any chunking, resident memory of
// only the chunk buffers, checkpoint round trips and resume, and clear errors naming the
// directory when it cannot be created or filled.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>
#include <vector>

#include "io/temp_dir.h"
#include "optim/adamw.h"
#include "optim/offload.h"
#include "segment_problem.h"

namespace strata {

namespace {

using io::error_of;
using io::TempDir;
using testing::kSpecs;
using testing::kStateSize;
using testing::lr_at;
using testing::Problem;
using testing::same_bits;
using testing::test_config;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct State {
  std::vector<float> master, m, v;
  explicit State(int64_t n)
      : master(static_cast<size_t>(n)), m(static_cast<size_t>(n)), v(static_cast<size_t>(n)) {}
  static State of(const OffloadedAdamW& opt) {
    State s(opt.state_size());
    opt.read_state(s.master.data(), s.m.data(), s.v.data());
    return s;
  }
};

// Checks the offloaded state against AdamW's: moments over the whole state (padding included:
// zero in both), master values equal to the reference params.
void expect_same_state(const OffloadedAdamW& off, const AdamW& ref, const Problem& ref_problem) {
  const State s = State::of(off);
  EXPECT_TRUE(same_bits(s.m.data(), ref.first_moment(), kStateSize, "exp_avg"));
  EXPECT_TRUE(same_bits(s.v.data(), ref.second_moment(), kStateSize, "exp_avg_sq"));
  for (size_t i = 0; i < kSpecs.size(); ++i)
    EXPECT_TRUE(same_bits(s.master.data() + kSpecs[i].offset, ref_problem.params[i].data(),
                          kSpecs[i].count, "master"))
        << "segment " << i;
}

class OffloadEquality : public ::testing::TestWithParam<std::tuple<int64_t, int>> {};

TEST_P(OffloadEquality, BitwiseEqualToAdamW) {
  const auto [chunk, buffers] = GetParam();
  TempDir dir;
  Arena arena;
  const OptimConfig config = test_config();
  Problem ref_problem(1), off_problem(1);
  AdamW ref(ref_problem.segments(), kStateSize, arena, config);
  OffloadedAdamW off(off_problem.segments(), kStateSize, arena, config,
                     {dir.path() + "/state", chunk, buffers});
  off.init_from_params();
  ASSERT_TRUE(std::filesystem::exists(dir.path() + "/state/master.bin"));
  EXPECT_EQ(std::filesystem::file_size(dir.path() + "/state/exp_avg_sq.bin"),
            static_cast<uintmax_t>(kStateSize * 4));

  arena.freeze();
  for (int step = 0; step < 5; ++step) {
    ref_problem.fill_grads(100 + static_cast<uint32_t>(step));
    off_problem.fill_grads(100 + static_cast<uint32_t>(step));
    const float grad_scale = step % 2 == 0 ? 0.37f : 1.0f;
    ref.step(lr_at(step), grad_scale);
    off.step(lr_at(step), grad_scale);
    ASSERT_TRUE(off_problem.same_params(ref_problem)) << "after step " << step + 1;
    EXPECT_EQ(off.steps_taken(), ref.steps_taken());
    EXPECT_EQ(off.last_io_bytes(), 2 * 3 * kStateSize * 4);
    EXPECT_GE(off.last_io_wait_s(), 0.0);
  }
  EXPECT_EQ(arena.allocations_after_freeze(), 0);
  expect_same_state(off, ref, ref_problem);
}

INSTANTIATE_TEST_SUITE_P(Chunks, OffloadEquality,
                         ::testing::Values(std::make_tuple(int64_t{1000}, 3),
                                           std::make_tuple(int64_t{1} << 20, 3),  // > state
                                           std::make_tuple(int64_t{333}, 1),
                                           std::make_tuple(int64_t{777}, 2),
                                           std::make_tuple(int64_t{61}, 5),
                                           std::make_tuple(int64_t{7}, 3)));

TEST(Offload, ResidentMemoryIsOnlyTheChunkBuffers) {
  TempDir dir;
  Arena arena;
  constexpr int64_t kState = 1 << 20, kChunk = 4096;
  std::vector<float> p(kState, 1.0f), g(kState, 0.5f);
  OffloadedAdamW off({{p.data(), g.data(), kState, true, 0}}, kState, arena, test_config(),
                     {dir.path(), kChunk, 3});
  EXPECT_EQ(arena.current(MemCategory::master), 3 * kChunk * 4);
  EXPECT_EQ(arena.current(MemCategory::optimizer), 2 * 3 * kChunk * 4);
  const int64_t resident =
      arena.current(MemCategory::master) + arena.current(MemCategory::optimizer);
  EXPECT_LT(resident * 20, 3 * kState * 4);
  off.init_from_params();
  off.step(1e-3f, 1.0f);
  EXPECT_EQ(arena.current(MemCategory::master) + arena.current(MemCategory::optimizer), resident);

  // A chunk larger than the state shrinks to it, and one chunk needs one buffer.
  Arena small;
  OffloadedAdamW whole({{p.data(), g.data(), 1000, true, 0}}, 1000, small, test_config(),
                       {dir.path() + "/whole", int64_t{1} << 20, 3});
  EXPECT_EQ(small.current(MemCategory::master) + small.current(MemCategory::optimizer),
            3 * 1000 * 4);
}

TEST(Offload, StateRoundTripAndWriteStateRefreshesParams) {
  TempDir dir;
  Arena arena;
  Problem problem(7);
  OffloadedAdamW off(problem.segments(), kStateSize, arena, test_config(), {dir.path(), 1000, 3});
  State in(kStateSize);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto* vec : {&in.master, &in.m, &in.v})
    for (float& x : *vec) x = dist(rng);
  off.write_state(in.master.data(), in.m.data(), in.v.data());
  const State out = State::of(off);
  EXPECT_TRUE(same_bits(out.master.data(), in.master.data(), kStateSize, "master"));
  EXPECT_TRUE(same_bits(out.m.data(), in.m.data(), kStateSize, "exp_avg"));
  EXPECT_TRUE(same_bits(out.v.data(), in.v.data(), kStateSize, "exp_avg_sq"));
  for (size_t i = 0; i < kSpecs.size(); ++i)
    EXPECT_TRUE(same_bits(problem.params[i].data(), in.master.data() + kSpecs[i].offset,
                          kSpecs[i].count, "param"));

  // init_from_params: master = params, moments zero, padding zero.
  off.init_from_params();
  const State init = State::of(off);
  for (int64_t i = 0; i < kStateSize; ++i) {
    ASSERT_EQ(init.m[static_cast<size_t>(i)], 0.0f);
    ASSERT_EQ(init.v[static_cast<size_t>(i)], 0.0f);
  }
  EXPECT_EQ(init.master[700], 0.0f);  // padding between the first two segments
  EXPECT_EQ(off.steps_taken(), 0);
}

TEST(Offload, ResumeFromStateMatchesUninterruptedRun) {
  TempDir dir;
  Arena arena;
  const OptimConfig config = test_config();
  Problem straight(11), resumed(11);
  OffloadedAdamW a(straight.segments(), kStateSize, arena, config, {dir.path() + "/a", 1000, 3});
  a.init_from_params();
  for (int step = 0; step < 3; ++step) {
    straight.fill_grads(200 + static_cast<uint32_t>(step));
    a.step(lr_at(step), 0.8f);
  }
  const State checkpoint = State::of(a);
  {
    // A fresh run (different chunking, parameters not yet loaded) resumes from the checkpoint.
    OffloadedAdamW b(resumed.segments(), kStateSize, arena, config, {dir.path() + "/b", 512, 2});
    b.write_state(checkpoint.master.data(), checkpoint.m.data(), checkpoint.v.data());
    b.set_steps_taken(a.steps_taken());
    ASSERT_TRUE(resumed.same_params(straight));
    for (int step = 3; step < 6; ++step) {
      straight.fill_grads(200 + static_cast<uint32_t>(step));
      resumed.fill_grads(200 + static_cast<uint32_t>(step));
      a.step(lr_at(step), 0.8f);
      b.step(lr_at(step), 0.8f);
    }
    EXPECT_TRUE(resumed.same_params(straight));
    const State sa = State::of(a), sb = State::of(b);
    EXPECT_TRUE(same_bits(sa.master.data(), sb.master.data(), kStateSize, "master"));
    EXPECT_TRUE(same_bits(sa.m.data(), sb.m.data(), kStateSize, "exp_avg"));
    EXPECT_TRUE(same_bits(sa.v.data(), sb.v.data(), kStateSize, "exp_avg_sq"));
  }
}

TEST(Offload, UncreatableDirectoryIsAnErrorNamingIt) {
  TempDir dir;
  const std::string file = dir.file("not_a_dir");
  std::ofstream(file) << "x";
  const std::string bad = file + "/offload";
  Arena arena;
  std::vector<float> p(100), g(100);
  const std::string message = error_of([&] {
    OffloadedAdamW off({{p.data(), g.data(), 100, true, 0}}, 100, arena, test_config(),
                       {bad, 64, 3});
  });
  EXPECT_TRUE(contains(message, "cannot create the directory")) << message;
  EXPECT_TRUE(contains(message, "'" + bad + "'")) << message;
  EXPECT_TRUE(contains(message, "writable")) << message;

  const std::string empty = error_of([&] {
    OffloadedAdamW off({{p.data(), g.data(), 100, true, 0}}, 100, arena, test_config(), {});
  });
  EXPECT_TRUE(contains(empty, "no directory")) << empty;
}

// Caps the size of any file this process writes, so that reserving the state files fails with
// EFBIG as it would with ENOSPC on a full disk (and works as root, unlike a read-only directory).
class FileSizeCap {
 public:
  explicit FileSizeCap(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit cap = saved_;
    cap.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &cap);
  }
  ~FileSizeCap() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeCap(const FileSizeCap&) = delete;
  FileSizeCap& operator=(const FileSizeCap&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

TEST(Offload, FullDiskIsAnErrorNamingTheDirectory) {
  TempDir dir;
  Arena arena;
  constexpr int64_t kState = 1 << 16;
  std::vector<float> p(kState), g(kState);
  std::string message;
  {
    FileSizeCap cap(4096);
    message = error_of([&] {
      OffloadedAdamW off({{p.data(), g.data(), kState, true, 0}}, kState, arena, test_config(),
                         {dir.path(), 1024, 3});
    });
  }
  EXPECT_TRUE(contains(message, dir.path() + "/master.bin")) << message;
  EXPECT_TRUE(contains(message, "full")) << message;
  EXPECT_TRUE(contains(message, "'" + dir.path() + "'")) << message;
}

TEST(Offload, WriteErrorInAStepIsReportedAndTheOptimizerStaysUsable) {
  TempDir dir;
  Arena arena;
  Problem problem(5);
  OffloadedAdamW off(problem.segments(), kStateSize, arena, test_config(), {dir.path(), 1000, 3});
  off.init_from_params();
  problem.fill_grads(9);
  std::string message;
  {
    // Writes past byte 8192 fail (EFBIG, as a full disk would with ENOSPC) while reads succeed.
    FileSizeCap cap(8192);
    message = error_of([&] { off.step(1e-3f, 1.0f); });
  }
  EXPECT_TRUE(contains(message, "cannot write")) << message;
  EXPECT_TRUE(contains(message, dir.path() + "/master.bin")) << message;
  EXPECT_TRUE(contains(message, "resume from a checkpoint")) << message;
  // The queue was drained: the next step runs (on the partly updated state) and the I/O thread
  // still joins at destruction.
  off.step(1e-3f, 1.0f);
  EXPECT_EQ(off.steps_taken(), 2);
}

TEST(Offload, TwoOptimizersCannotShareADirectory) {
  TempDir dir;
  Arena arena;
  std::vector<float> p(100), g(100);
  OffloadedAdamW first({{p.data(), g.data(), 100, true, 0}}, 100, arena, test_config(),
                       {dir.path(), 64, 3});
  const std::string message = error_of([&] {
    OffloadedAdamW second({{p.data(), g.data(), 100, true, 0}}, 100, arena, test_config(),
                          {dir.path(), 64, 3});
  });
  EXPECT_TRUE(contains(message, "in use by another optimizer")) << message;
  EXPECT_TRUE(contains(message, dir.path())) << message;
}

TEST(Offload, BadSegmentsAreErrors) {
  TempDir dir;
  Arena arena;
  std::vector<float> p(100), g(100);
  const std::string overlap = error_of([&] {
    OffloadedAdamW off({{p.data(), g.data(), 60, true, 0}, {p.data(), g.data(), 40, true, 50}}, 100,
                       arena, test_config(), {dir.path(), 64, 3});
  });
  EXPECT_TRUE(contains(overlap, "overlap")) << overlap;
  const std::string outside = error_of([&] {
    OffloadedAdamW off({{p.data(), g.data(), 100, true, 10}}, 100, arena, test_config(),
                       {dir.path(), 64, 3});
  });
  EXPECT_TRUE(contains(outside, "does not fit")) << outside;
}

}  // namespace

}  // namespace strata
