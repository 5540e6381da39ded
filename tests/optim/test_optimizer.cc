// The one Optimizer interface (optim/optimizer.h) the trainer steps and checkpoints every kind
// through: AdamW in the model's memory, AdamW with its state in files (optim.offload = "nvme")
// and in host memory ("cpu"). Through the interface alone, each kind's state read after three
// steps and written into a fresh optimizer resumes bitwise like the uninterrupted run, and all
// three kinds make the same updates.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/temp_dir.h"
#include "optim/adamw.h"
#include "optim/host_offload.h"
#include "optim/offload.h"
#include "segment_problem.h"

namespace strata {
namespace {

using testing::kStateSize;
using testing::lr_at;
using testing::Problem;
using testing::same_bits;
using testing::test_config;

using Make = std::function<std::unique_ptr<Optimizer>(Problem&, const std::string& tag)>;

struct Kind {
  const char* name;
  bool in_model_memory;
  Make make;
};

std::vector<Kind> kinds(Arena& arena, const io::TempDir& dir) {
  const OptimConfig c = test_config();
  return {
      {"adamw", true,
       [&arena, c](Problem& p, const std::string&) -> std::unique_ptr<Optimizer> {
         return std::make_unique<AdamW>(p.segments(), kStateSize, arena, c);
       }},
      {"nvme", false,
       [&arena, &dir, c](Problem& p, const std::string& tag) -> std::unique_ptr<Optimizer> {
         auto o = std::make_unique<OffloadedAdamW>(p.segments(), kStateSize, arena, c,
                                                   OffloadOptions{dir.path() + "/" + tag, 700, 3});
         o->init_from_params();
         return o;
       }},
      {"cpu", false,
       [c](Problem& p, const std::string&) -> std::unique_ptr<Optimizer> {
         return std::make_unique<HostOffloadAdamW>(p.segments(), kStateSize, c, cpu_backend(),
                                                   HostOffloadOptions{900});
       }},
  };
}

struct State {
  std::vector<float> master, m, v;
  explicit State(const Optimizer& o)
      : master(static_cast<size_t>(o.state_size())), m(master.size()), v(master.size()) {
    o.read_state(master.data(), m.data(), v.data());
  }
};

TEST(Optimizer, EveryKindResumesBitwiseThroughTheInterface) {
  Arena arena;
  io::TempDir dir;
  Problem adamw_run(5);  // the first kind's (AdamW's) params, which every kind must equal
  bool first = true;
  for (const Kind& k : kinds(arena, dir)) {
    SCOPED_TRACE(k.name);
    Problem straight(5), resumed(5);
    std::unique_ptr<Optimizer> a = k.make(straight, std::string(k.name) + "_a");
    EXPECT_EQ(a->state_in_model_memory(), k.in_model_memory);
    EXPECT_EQ(a->first_moment() != nullptr, k.in_model_memory);
    for (int step = 0; step < 3; ++step) {
      straight.fill_grads(300 + static_cast<uint32_t>(step));
      a->step(lr_at(step), 0.7f);
    }
    const State saved(*a);
    if (k.in_model_memory) {  // read_state reads the moments the checkpoint reads in place
      EXPECT_TRUE(same_bits(saved.m.data(), a->first_moment(), kStateSize, "exp_avg"));
      EXPECT_TRUE(same_bits(saved.v.data(), a->second_moment(), kStateSize, "exp_avg_sq"));
    }
    std::unique_ptr<Optimizer> b = k.make(resumed, std::string(k.name) + "_b");
    b->write_state(saved.master.data(), saved.m.data(), saved.v.data());
    b->set_steps_taken(a->steps_taken());
    ASSERT_TRUE(resumed.same_params(straight)) << "write_state puts the master into the params";
    for (int step = 3; step < 6; ++step) {
      straight.fill_grads(300 + static_cast<uint32_t>(step));
      resumed.fill_grads(300 + static_cast<uint32_t>(step));
      a->step(lr_at(step), 0.7f);
      b->step(lr_at(step), 0.7f);
    }
    EXPECT_EQ(b->steps_taken(), 6);
    EXPECT_TRUE(resumed.same_params(straight));
    const State sa(*a), sb(*b);
    EXPECT_TRUE(same_bits(sa.m.data(), sb.m.data(), kStateSize, "exp_avg"));
    EXPECT_TRUE(same_bits(sa.v.data(), sb.v.data(), kStateSize, "exp_avg_sq"));
    if (first) {
      adamw_run = straight;
      first = false;
    } else {
      EXPECT_TRUE(straight.same_params(adamw_run)) << "the same updates as AdamW";
    }
  }
}

}  // namespace
}  // namespace strata
