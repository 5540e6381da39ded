// run_calibrate (calibrate.h): who measures what (alone, a rank of mpirun, or a rank of the
// re-run), the profile built from the measurements, and its TOML.
#include <mpi.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_comm.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "launch/command.h"
#include "plan/calibrate.h"

extern char** environ;

namespace strata {

namespace {

constexpr const char* kCommEnv = "STRATA_CALIBRATE_COMM";

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.0f MiB", b / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024);
  return buf;
}

nlohmann::json comm_to_json(const CommMeasurement& m) {
  nlohmann::json j;
  j["ranks"] = m.ranks;
  for (int op = 0; op < kNumCollectiveOps; ++op) {
    nlohmann::json o;
    o["latency_s"] = m.ops[static_cast<size_t>(op)].latency_s;
    o["bandwidth"] = m.ops[static_cast<size_t>(op)].bandwidth;
    for (const CommPoint& p : m.points[static_cast<size_t>(op)])
      o["points"].push_back({p.bytes, p.seconds});
    j["ops"][collective_name(static_cast<CollectiveOp>(op))] = o;
  }
  return j;
}

CommMeasurement comm_from_json(const nlohmann::json& j) {
  CommMeasurement m;
  m.ranks = j.at("ranks").get<int>();
  for (int op = 0; op < kNumCollectiveOps; ++op) {
    const nlohmann::json& o = j.at("ops").at(collective_name(static_cast<CollectiveOp>(op)));
    m.ops[static_cast<size_t>(op)].latency_s = o.at("latency_s").get<double>();
    m.ops[static_cast<size_t>(op)].bandwidth = o.at("bandwidth").get<double>();
    for (const auto& p : o.at("points"))
      m.points[static_cast<size_t>(op)].push_back({p[0].get<double>(), p[1].get<double>()});
  }
  return m;
}

// Ranks other than 0 wait here while rank 0 measures compute, without taking a core from it.
void sleeping_barrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  int done = 0;
  while (!done) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string a;
  while (std::getline(in, a, '\0')) args.push_back(a);
  if (!args.empty()) args.erase(args.begin());
  return args;
}

// Runs this command line again under mpirun with `ranks` ranks, each measuring collectives;
// rank 0 writes them to a JSON file read back here.
CommMeasurement measure_collectives_in_child_job(const CalibrateOptions& o) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("strata_calibrate_" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::filesystem::remove(path);
  launch::LaunchOptions lo;
  lo.ranks = o.ranks;
  lo.args = own_arguments();
  ::setenv(kCommEnv, path.c_str(), 1);
  const launch::LaunchEnv env = launch::detect_launch_env(lo);
  std::vector<std::string> cmd = launch::build_command(lo, env);
  ::unsetenv(kCommEnv);
  // One machine: Open MPI's shared-memory transport, the one this profile describes.
  if (!cmd.empty() && cmd[0] == "mpirun")
    cmd.insert(cmd.begin() + 3, {"--mca", "btl", "self,vader"});
  std::printf("measuring collectives: %s\n", launch::format_command(cmd).c_str());
  std::fflush(stdout);
  std::vector<char*> argv;
  for (std::string& s : cmd) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; e && *e; ++e) envs.emplace_back(*e);
  envs.push_back(std::string(kCommEnv) + "=" + path);
  std::vector<char*> envp;
  for (std::string& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data());
  STRATA_CHECK(rc == 0, "cannot start ", argv[0], " to measure collectives: ", std::strerror(rc),
               "; run `mpirun -np 2 strata plan --calibrate` yourself");
  int status = 0;
  ::waitpid(pid, &status, 0);
  STRATA_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the collective measurement job (",
               launch::format_command(cmd), ") failed");
  std::ifstream in(path);
  STRATA_CHECK(in.good(), "the collective measurement job wrote no results to ", path);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  return comm_from_json(j);
}

void print_summary(const ComputeMeasurement& c, const CommMeasurement* comm) {
  std::printf("this machine: %s, %lld cores, %.1f GiB\n", c.cpu.c_str(), (long long)c.cores,
              static_cast<double>(c.memory_bytes) / (1 << 30));
  std::printf(
      "  GEMM per core (1 thread): f32 %.1f GFLOP/s, bf16 %.1f, fp16 %.1f; one process on %lld "
      "cores %.1f (thread efficiency %.2f); one worker per core %.1f (%.2f cores available)\n",
      c.gemm_f32 / 1e9, c.gemm_bf16 / 1e9, c.gemm_fp16 / 1e9, (long long)c.cores,
      c.gemm_f32_all / 1e9, c.gemm_f32_all / (static_cast<double>(c.cores) * c.gemm_f32),
      c.gemm_node / 1e9, c.gemm_node / c.gemm_f32);
  std::printf("  attention per core: flash f32 %.1f GFLOP/s, flash bf16 %.1f, naive f32 %.1f\n",
              c.flash_f32 / 1e9, c.flash_bf16 / 1e9, c.naive_flops / c.naive_seconds / 1e9);
  std::printf(
      "  memory: stream triad %.1f GB/s (1 core), %.1f GB/s (%lld cores); strata's "
      "memory-bound kernels %.1f GB/s (1 core), %.1f GB/s (%lld cores)\n",
      c.stream_core / 1e9, c.stream_node / 1e9, (long long)c.cores, c.kernels_core / 1e9,
      c.kernels_node / 1e9, (long long)c.cores);
  if (!comm) return;
  std::printf("  collectives through Comm (%d ranks, shared memory), fitted per ring step:\n",
              comm->ranks);
  for (int op = 0; op < kNumCollectiveOps; ++op) {
    const OpCost& f = comm->ops[static_cast<size_t>(op)];
    std::string pts;
    for (const CommPoint& p : comm->points[static_cast<size_t>(op)]) {
      pts.append(" ").append(human_bytes(p.bytes)).append(" ");
      pts.append(num(p.seconds * 1e6)).append(" us;");
    }
    std::printf("    %-14s latency %6.2f us, bus bandwidth %6.2f GB/s  [%s ]\n",
                collective_name(static_cast<CollectiveOp>(op)), f.latency_s * 1e6,
                f.bandwidth / 1e9, pts.c_str());
  }
}

void write_profile(const CalibrateOptions& o, const ComputeMeasurement& c,
                   const CommMeasurement* comm) {
  const ClusterProfile p = calibrated_profile(c, comm, o.name);
  const std::string text = calibrated_profile_toml(p, c, comm);
  parse_cluster_profile(text, o.out);  // what we write must read back
  std::ofstream out(o.out);
  STRATA_CHECK(out.good(), "cannot write the calibrated profile to ", o.out);
  out << text;
  out.close();
  STRATA_CHECK(out.good(), "cannot write the calibrated profile to ", o.out);
  std::printf("wrote %s: use it as `strata plan CONFIG --cluster %s`\n", o.out.c_str(),
              o.out.c_str());
}

}  // namespace

ClusterProfile calibrated_profile(const ComputeMeasurement& c, const CommMeasurement* comm,
                                  const std::string& name) {
  ClusterProfile p;
  p.name = !name.empty() ? name : "calibrated-" + (c.host.empty() ? std::string("host") : c.host);
  p.source = "strata plan --calibrate";
  p.gpus_per_node = c.cores;  // at most one rank per core
  p.max_nodes = 1;
  DeviceProfile& d = p.device;
  d.name = c.cpu;
  d.kind = Device::cpu;
  d.cores = c.cores;
  d.memory_capacity_bytes = c.memory_bytes / c.cores;
  d.memory_bytes = d.memory_capacity_bytes;
  d.flops_f32 = c.gemm_f32;
  d.flops_bf16 = c.gemm_bf16;
  d.flops_fp16 = c.gemm_fp16;
  d.gemm_efficiency = 1.0;  // the rates are measured ones
  d.thread_efficiency = std::min(1.0, c.gemm_f32_all / (static_cast<double>(c.cores) * c.gemm_f32));
  d.available_cores = std::min(static_cast<double>(c.cores), c.gemm_node / c.gemm_f32);
  d.mem_bandwidth = c.kernels_core;
  d.mem_bandwidth_node = c.kernels_node;
  d.memory_efficiency = 1.0;
  auto frac = [](double x) { return std::clamp(x, 0.01, 1.0); };
  d.attention_efficiency = frac(c.flash_f32 / c.gemm_f32);
  d.attention_bf16_efficiency = frac(c.flash_bf16 / c.gemm_bf16);
  const double naive_compute_s =
      std::max(0.2 * c.naive_seconds, c.naive_seconds - c.naive_probs_bytes / c.kernels_core);
  d.naive_attention_efficiency = frac(c.naive_flops / naive_compute_s / c.gemm_f32);
  d.cross_entropy_efficiency = frac(c.ce_fused / c.kernels_core);
  d.vocab_parallel_ce_efficiency = frac(c.ce_vocab_parallel / c.kernels_core);
  d.source = p.source;
  LinkProfile& l = p.intra;
  l.kind = "shm";
  l.efficiency = 1.0;
  l.overlap = 0.0;  // shared-memory copies are made by the cores that compute
  if (comm) {
    l.ops = comm->ops;
    l.bandwidth = comm->ops[static_cast<size_t>(CollectiveOp::all_reduce)].bandwidth;
    l.latency_s = comm->ops[static_cast<size_t>(CollectiveOp::all_reduce)].latency_s;
  } else {
    l.bandwidth = 4e9;  // not measured: docs/PERFORMANCE.md's 2-rank all-reduce on this kind of VM
    l.latency_s = 10e-6;
  }
  p.inter = l;
  return p;
}

std::string calibrated_profile_toml(const ClusterProfile& p, const ComputeMeasurement& c,
                                    const CommMeasurement* comm) {
  const DeviceProfile& d = p.device;
  const LinkProfile& l = p.intra;
  std::ostringstream s;
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&t));
  s << "# This machine, measured by `strata plan --calibrate` on " << c.host << " at " << date
    << ".\n# Rates are per core (one thread); a rank of k threads gets k times them times\n"
    << "# thread_efficiency, and the ranks of the node share its cores (profiles/README.md).\n"
    << "name = \"" << p.name << "\"\n"
    << "gpus_per_node = " << p.gpus_per_node << "  # ranks per node: one per core at most\n"
    << "max_nodes = 1\n"
    << "source = \"strata plan --calibrate (" << date << ")\"\n\n"
    << "[device]\nname = \"" << d.name << "\"\nkind = \"cpu\"\ncores = " << d.cores << "\n"
    << "memory_gib = " << num(static_cast<double>(d.memory_bytes) / (1 << 30))
    << "  # per rank: the node's " << num(static_cast<double>(c.memory_bytes) / (1 << 30))
    << " GiB / " << d.cores << "\n"
    << "f32_tflops = " << num(d.flops_f32 / 1e12) << "  # kernels::gemm, forward + dx + dw\n"
    << "bf16_tflops = " << num(d.flops_bf16 / 1e12) << "  # kernels::gemm_bf16\n"
    << "fp16_tflops = " << num(d.flops_fp16 / 1e12)
    << "  # the f16 linear path (operands widened to f32)\n"
    << "thread_efficiency = " << num(d.thread_efficiency) << "  # f32 GEMM, one process on "
    << d.cores << " cores: " << num(c.gemm_f32_all / 1e12) << " TFLOP/s\n"
    << "# One single-threaded GEMM worker per core, together: " << num(c.gemm_node / 1e12)
    << " TFLOP/s, the compute of\n# this many cores (other processes on the machine take the "
       "rest):\n"
    << "available_cores = " << num(d.available_cores) << "\n"
    << "# Memory-bound rate: strata's norm, GELU, SwiGLU, add, conversion, cross-entropy and "
       "AdamW\n"
    << "# kernels (the bytes plan/perf_terms.h counts / time). Stream triad for comparison:\n# "
    << num(c.stream_core / 1e9) << " GB/s on 1 core, " << num(c.stream_node / 1e9) << " on "
    << d.cores << ".\n"
    << "memory_bandwidth_gb_s = " << num(d.mem_bandwidth / 1e9) << "\n"
    << "memory_bandwidth_node_gb_s = " << num(d.mem_bandwidth_node / 1e9) << "\n\n"
    << "[device.efficiency]\ngemm = 1.0\n"
    << "attention = " << num(d.attention_efficiency) << "  # flash f32: " << num(c.flash_f32 / 1e9)
    << " GFLOP/s\n"
    << "attention_bf16 = " << num(d.attention_bf16_efficiency)
    << "  # flash bf16: " << num(c.flash_bf16 / 1e9) << " GFLOP/s\n"
    << "naive_attention = " << num(d.naive_attention_efficiency) << "  # naive f32, "
    << num(c.naive_seconds * 1e3) << " ms for b 4, T 256, 8 heads\n"
    << "memory = 1.0\n"
    << "cross_entropy = " << num(d.cross_entropy_efficiency)
    << "  # fused softmax + CE: " << num(c.ce_fused / 1e9) << " GB/s\n"
    << "vocab_parallel_ce = " << num(d.vocab_parallel_ce_efficiency)
    << "  # the tp > 1 kernels: " << num(c.ce_vocab_parallel / 1e9) << " GB/s\n\n"
    << "[intra]  # shared memory through Open MPI (vader), measured through strata's Comm\n"
    << "kind = \"shm\"\nbandwidth_gb_s = " << num(l.bandwidth / 1e9)
    << "\nlatency_us = " << num(l.latency_s * 1e6) << "\nefficiency = 1.0\n"
    << "overlap = 0.0  # the copies are made by the same cores that compute\n";
  if (!comm) {
    s << "# Collectives NOT measured (run with 2 or more ranks): defaults.\n";
  } else {
    for (int op = 0; op < kNumCollectiveOps; ++op) {
      const OpCost& f = l.ops[static_cast<size_t>(op)];
      s << "\n[intra." << collective_name(static_cast<CollectiveOp>(op)) << "]  # " << comm->ranks
        << " ranks:";
      for (const CommPoint& pt : comm->points[static_cast<size_t>(op)])
        s << " " << human_bytes(pt.bytes) << " " << num(pt.seconds * 1e6) << " us;";
      s << "\nbandwidth_gb_s = " << num(f.bandwidth / 1e9)
        << "\nlatency_us = " << num(f.latency_s * 1e6) << "\n";
    }
  }
  return s.str();
}

int run_calibrate(const CalibrateOptions& o) {
  if (const char* path = std::getenv(kCommEnv)) {  // a rank of the re-run: collectives only
    MpiSession mpi;
    std::unique_ptr<MpiComm> world = MpiComm::dup_world("calibrate");
    const CommMeasurement m = measure_collectives(*world, o.quick);
    if (world->rank() == 0) std::ofstream(path) << comm_to_json(m).dump();
    return 0;
  }
  const RankEnv env = detect_rank_env();
  if (env.launcher != Launcher::none && env.world_size != 1) {  // one rank of mpirun / srun
    MpiSession mpi;
    const int rank = mpi_world_rank();
    ComputeMeasurement c;
    if (rank == 0) c = measure_compute(o.quick);
    sleeping_barrier();
    std::unique_ptr<MpiComm> world = MpiComm::dup_world("calibrate");
    CommMeasurement m;
    if (world->size() >= 2) m = measure_collectives(*world, o.quick);
    if (rank == 0) {
      print_summary(c, world->size() >= 2 ? &m : nullptr);
      write_profile(o, c, world->size() >= 2 ? &m : nullptr);
    }
    return 0;
  }
  const ComputeMeasurement c = measure_compute(o.quick);
  if (o.ranks < 2) {
    print_summary(c, nullptr);
    std::printf(
        "collectives not measured (--ranks %d): the profile has a default shared-memory "
        "link\n",
        o.ranks);
    write_profile(o, c, nullptr);
    return 0;
  }
  CommMeasurement m;
  try {
    m = measure_collectives_in_child_job(o);
  } catch (const Error& e) {
    print_summary(c, nullptr);
    std::fprintf(stderr, "error: %s\n", e.what());
    write_profile(o, c, nullptr);
    std::fprintf(stderr, "the profile was written without measured collectives\n");
    return 1;
  }
  print_summary(c, &m);
  write_profile(o, c, &m);
  return 0;
}

}  // namespace strata
