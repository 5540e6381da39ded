// Data and tensor parallelism on a device whose memory the host cannot touch: the trainer runs on
// the guarded backend of the model tests, and its process groups are routed as on GPUs
// (ProcessGroups::route_through): operations on device buffers go through GuardedComm (standing
// for NCCL: it alone may reach device memory), host buffers over MPI as before. Any host access
// to a device buffer outside the backend and the device comm crashes; and every step's loss and
// the final parameters must equal the plain CPU run's bit for bit. Run as 2 ranks. The cases with
// parallel.cp > 1 and document masking check the same of ContextAttention: its ring sends and
// Ulysses all-to-alls on device buffers, its masks uploaded.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/layout.h"
#include "comm/process_groups.h"
#include "model/guarded_backend.h"
#include "run/config.h"
#include "train/trainer.h"

namespace strata {
namespace {

// A group's comm on guarded memory: device buffers are unlocked for the MPI operation, which
// completes before they are locked again (the Work returned is already done); host buffers pass
// straight to MPI. Mixing the two in one operation is an error, as in DeviceHostComm.
class GuardedComm : public Comm {
 public:
  // A transfer through a host buffer; a receive lands in the device buffer when waited for.
  struct Staged final : Work {
    Staged(testing::GuardedMemory& m, int64_t bytes, void* dst)
        : memory(m), host(static_cast<size_t>(bytes)), device_dst(dst) {}
    bool test() override {
      if (!mpi->test()) return false;
      finish();
      return true;
    }
    void wait() override {
      mpi->wait();
      finish();
    }
    void finish() {
      if (!device_dst) return;
      const testing::Unlocked unlocked(memory);
      std::memcpy(device_dst, host.data(), host.size());
      device_dst = nullptr;
    }
    testing::GuardedMemory& memory;
    std::vector<char> host;
    void* device_dst;
    WorkHandle mpi;
  };

  GuardedComm(MpiComm& mpi, testing::GuardedMemory& memory) : mpi_(mpi), memory_(memory) {}

  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  const std::string& name() const override { return mpi_.name(); }
  int world_rank_of(int r) const override { return mpi_.world_rank_of(r); }

  WorkHandle all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    return run(buf, nullptr, [&] { return mpi_.all_reduce(buf, count, dtype, op); });
  }
  WorkHandle reduce_scatter(const void* send, void* recv, int64_t n, DType dtype,
                            ReduceOp op) override {
    return run(send, recv, [&] { return mpi_.reduce_scatter(send, recv, n, dtype, op); });
  }
  WorkHandle all_gather(const void* send, void* recv, int64_t n, DType dtype) override {
    return run(send, recv, [&] { return mpi_.all_gather(send, recv, n, dtype); });
  }
  WorkHandle broadcast(void* buf, int64_t count, DType dtype, int root) override {
    return run(buf, nullptr, [&] { return mpi_.broadcast(buf, count, dtype, root); });
  }
  WorkHandle all_to_all_v(const void* send, const int64_t* send_counts, void* recv,
                          const int64_t* recv_counts, DType dtype) override {
    return run(send, recv,
               [&] { return mpi_.all_to_all_v(send, send_counts, recv, recv_counts, dtype); });
  }
  // Point-to-point transfers of device buffers are staged through host memory, as
  // DeviceHostComm does on GPUs (a blocking send could deadlock the pipeline's schedule).
  WorkHandle send(const void* buf, int64_t count, DType dtype, int peer, int tag) override {
    if (!memory_.contains(buf)) return mpi_.send(buf, count, dtype, peer, tag);
    ++device_ops_;
    auto work =
        std::make_shared<Staged>(memory_, count * static_cast<int64_t>(dtype_size(dtype)), nullptr);
    {
      const testing::Unlocked unlocked(memory_);
      std::memcpy(work->host.data(), buf, work->host.size());
    }
    work->mpi = mpi_.send(work->host.data(), count, dtype, peer, tag);
    return work;
  }
  WorkHandle recv(void* buf, int64_t count, DType dtype, int peer, int tag) override {
    if (!memory_.contains(buf)) return mpi_.recv(buf, count, dtype, peer, tag);
    ++device_ops_;
    auto work =
        std::make_shared<Staged>(memory_, count * static_cast<int64_t>(dtype_size(dtype)), buf);
    work->mpi = mpi_.recv(work->host.data(), count, dtype, peer, tag);
    return work;
  }
  void barrier() override { mpi_.barrier(); }
  void set_step(int64_t step) override { mpi_.set_step(step); }
  void set_timeout(double seconds) override { mpi_.set_timeout(seconds); }
  CommStats stats() const override { return mpi_.stats(); }
  void reset_stats() override { mpi_.reset_stats(); }

  int64_t device_ops() const { return device_ops_; }

 private:
  template <typename Issue>
  WorkHandle run(const void* a, const void* b, Issue issue) {
    const bool device = memory_.contains(a);
    if (b) {
      EXPECT_EQ(device, memory_.contains(b)) << "one operation mixes device and host buffers";
    }
    if (!device) return issue();
    ++device_ops_;
    const testing::Unlocked unlocked(memory_);
    WorkHandle w = issue();
    w->wait();
    return w;
  }

  MpiComm& mpi_;
  testing::GuardedMemory& memory_;
  int64_t device_ops_ = 0;
};

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

struct Layoutcase {
  std::string family;
  int64_t tp, pp, zero;
  int64_t cp = 1;
  std::string cp_impl = "ring";
  bool document_mask = false;
};

RunConfig config_for(const Layoutcase& lc, const std::string& dir) {
  std::vector<std::string> sets = {"model.family=" + lc.family, "run.dir=" + dir,
                                   "run.resume=none",           cat("parallel.tp=", lc.tp),
                                   cat("parallel.pp=", lc.pp),  cat("parallel.zero=", lc.zero),
                                   cat("parallel.cp=", lc.cp),  "parallel.cp_impl=" + lc.cp_impl,
                                   "parallel.bucket_mb=0.02",   "train.grad_accum=2",
                                   "model.attention=flash"};
  if (lc.family == "llama") sets.push_back("model.n_kv_head=2");
  if (lc.document_mask) {
    sets.push_back("data.document_mask=true");
    sets.push_back("data.eos_id=7");  // synthetic tokens: about one document start in 256 rows
    sets.push_back("model.vocab_size=16");  // ... here one in 16, several a sequence
  }
  return parse_config(R"(
[model]
n_layer = 2
n_head = 4
d_model = 64
vocab_size = 256
max_seq_len = 32
[train]
steps = 4
batch_size = 2
seq_len = 32
eval_every = 0
[optim]
lr = 3e-3
warmup_steps = 2
[data]
source = "synthetic"
)",
                      "test", sets);
}

class DeviceGroups : public ::testing::TestWithParam<Layoutcase> {};

TEST_P(DeviceGroups, TrainsBitwiseLikeTheCpuTouchingDeviceBuffersOnlyThroughBackendAndComm) {
  const Layoutcase lc = GetParam();
  const int world = world_size();
  if (world % (lc.tp * lc.pp * lc.cp) != 0)
    GTEST_SKIP() << "tp " << lc.tp << " x pp " << lc.pp << " x cp " << lc.cp << " does not divide "
                 << world;
  const std::string tag = cat(lc.family, "_tp", lc.tp, "_pp", lc.pp, "_z", lc.zero, "_cp", lc.cp,
                              lc.cp_impl, lc.document_mask ? "_docs" : "");
  const Layout layout =
      resolve_layout(static_cast<int>(lc.tp), static_cast<int>(lc.pp), 0, static_cast<int>(lc.zero),
                     world, /*ep=*/1, static_cast<int>(lc.cp));
  const std::string base =
      (std::filesystem::temp_directory_path() / "strata_device_groups").string();
  std::vector<double> cpu_losses;
  std::vector<float> cpu_params;
  {
    ProcessGroups groups = ProcessGroups::create(layout);
    Trainer t(config_for(lc, cat(base, "/cpu_", tag)), &groups);
    for (int i = 0; i < 4; ++i) cpu_losses.push_back(t.train_step().loss);
    cpu_params = t.global_params();
  }
  testing::GuardedBackend device;
  ProcessGroups groups = ProcessGroups::create(layout);
  std::vector<GuardedComm*> comms;
  auto guarded = [&](MpiComm& mpi) {
    auto c = std::make_unique<GuardedComm>(mpi, device.guarded_memory());
    comms.push_back(c.get());
    return c;
  };
  ProcessGroups::Routes routes;
  routes.world = guarded(groups.mpi_world());
  routes.dp = guarded(groups.mpi_dp());
  routes.tp = guarded(groups.mpi_tp());
  routes.pp = guarded(groups.mpi_pp());
  routes.cp = guarded(groups.mpi_cp());
  const GuardedComm* cp_comm = comms.back();
  groups.route_through(std::move(routes));
  Trainer t(config_for(lc, cat(base, "/guarded_", tag)), &groups, &device);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.train_step().loss, cpu_losses[i]) << "step " << i;
  EXPECT_EQ(t.global_params(), cpu_params);
  int64_t device_ops = 0;
  for (const GuardedComm* c : comms) device_ops += c->device_ops();
  EXPECT_GT(device_ops, 0) << "no operation reached device buffers: the routes were not used";
  if (lc.cp > 1) {
    EXPECT_GT(cp_comm->device_ops(), 0) << "the cp group's route moved no device buffer";
  }
  EXPECT_TRUE(device.guarded_memory().locked());
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DeviceGroups,
    ::testing::Values(Layoutcase{"gpt2", 1, 1, 0}, Layoutcase{"gpt2", 1, 1, 1},
                      Layoutcase{"gpt2", 1, 1, 2}, Layoutcase{"llama", 1, 1, 3},
                      Layoutcase{"gpt2", 2, 1, 0}, Layoutcase{"llama", 2, 1, 1},
                      Layoutcase{"gpt2", 1, 2, 0}, Layoutcase{"llama", 1, 2, 0},
                      Layoutcase{"gpt2", 1, 1, 0, 1, "ring", true},
                      Layoutcase{"llama", 1, 1, 1, 2, "ring", false},
                      Layoutcase{"llama", 1, 1, 0, 2, "ring", true},
                      Layoutcase{"llama", 1, 1, 0, 2, "ulysses", false},
                      Layoutcase{"gpt2", 1, 1, 3, 2, "ulysses", true}),
    [](const auto& param_info) {
      const Layoutcase& c = param_info.param;
      return cat(c.family, "_tp", c.tp, "_pp", c.pp, "_zero", c.zero,
                 c.cp > 1 ? cat("_cp", c.cp, "_", c.cp_impl) : std::string(),
                 c.document_mask ? "_docmask" : "");
    });

}  // namespace
}  // namespace strata
