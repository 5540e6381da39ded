// Hardware and cluster profiles: datasheet rates of an accelerator and the interconnect tiers of
// a cluster, read from TOML data files (profiles/devices/*.toml, profiles/clusters/*.toml, with
// their sources written beside the numbers) or measured on this machine by `strata plan
// --calibrate`.
//
// The built-in files are compiled into the binary (profiles/embed.cmake), so a name works from any
// directory; a path to a TOML file of the same format works too (profiles/README.md).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "run/config.h"

namespace strata {

struct DeviceProfile {
  std::string name;
  Device kind = Device::cuda;         // kind = "gpu" (Device::cuda) or "cpu"
  int64_t memory_bytes = 0;           // usable device memory per GPU (per rank on a CPU)
  int64_t memory_capacity_bytes = 0;  // what the datasheet says (memory_bytes + reserved)
  double flops_bf16 = 0;              // dense peak matrix FLOP/s per dtype
  double flops_fp16 = 0;
  double flops_f32 = 0;      // the rate an f32 run's GEMMs get (TF32 tensor cores on GPUs)
  double mem_bandwidth = 0;  // bytes/s
  // Attainable fraction of the peak per operation class (roofline ceilings).
  double gemm_efficiency = 0.7;
  double attention_efficiency = 0.5;
  double memory_efficiency = 0.8;
  // A CPU (cores > 0): the FLOP/s and bytes/s above are per core, measured with one thread; a
  // rank running k threads gets k times them, times thread_efficiency when k > 1 (what the
  // cores lose together: shared caches, memory bandwidth, frequency). mem_bandwidth_node caps
  // the sum over a node's ranks. A GPU has cores = 0: every rate is per device.
  int64_t cores = 0;
  double thread_efficiency = 1.0;
  double mem_bandwidth_node = 0;
  // The cores' worth of compute the node gave one single-threaded worker per core when it was
  // calibrated (other processes took the rest); ranks on a node share it. 0: all `cores`.
  double available_cores = 0;
  // Attention kernels that are not flash (the naive kernel) reach this fraction of the matrix
  // rate instead of attention_efficiency; 0: the same as attention_efficiency.
  double naive_attention_efficiency = 0;
  // Attention in bf16 reaches this fraction of flops_bf16; 0: attention_efficiency.
  double attention_bf16_efficiency = 0;
  // The softmax + cross-entropy kernels (exp-bound more than memory-bound) reach this fraction
  // of mem_bandwidth, fused and vocabulary-parallel (tp > 1); 0: memory_efficiency.
  double cross_entropy_efficiency = 0;
  double vocab_parallel_ce_efficiency = 0;
  std::string source;  // where the numbers come from
  double matrix_flops(Precision precision) const;
  bool is_cpu() const { return cores > 0; }
  // The cores one rank computes on: min(threads, cores / ranks on its node) for a CPU
  // (threads <= 0 means all cores), 1 for a GPU.
  double rank_cores(int64_t threads, int64_t ranks_on_node) const;
  // What one rank's compute rates are multiplied by: rank_cores with thread_efficiency applied,
  // at most available_cores / ranks on the node (1 for a GPU).
  double rank_scale(int64_t threads, int64_t ranks_on_node) const;
};

// One collective's fitted cost on a link: time = algorithm steps * latency_s + bus bytes /
// bandwidth (collectives.h). Measured per operation by --calibrate, where the operations'
// implementations differ (Open MPI's reduce-scatter is slower than its all-reduce).
struct OpCost {
  double bandwidth = 0;   // bytes/s; 0: use the link's bandwidth * efficiency
  double latency_s = -1;  // < 0: use the link's latency
};

// all_to_all: the variable-size exchange of expert parallelism (Comm::all_to_all_v), each rank
// sending an equal block to every rank of the group.
enum class CollectiveOp {
  all_reduce = 0,
  reduce_scatter = 1,
  all_gather = 2,
  send = 3,
  all_to_all = 4
};
constexpr int kNumCollectiveOps = 5;
const char* collective_name(CollectiveOp op);  // "all_reduce", "reduce_scatter", ...

// One tier of the interconnect: bandwidth per GPU in one direction, and the latency of a message.
struct LinkProfile {
  std::string kind;      // "nvlink", "pcie", "infiniband", "roce", "shm"
  double bandwidth = 0;  // bytes/s per GPU
  double latency_s = 0;
  // Attainable fraction of `bandwidth` for collectives (NCCL's bus bandwidth / link rate).
  double efficiency = 1.0;
  // Fraction of a transfer's time that can run while the rank computes: 1 for DMA engines
  // (NVLink, network cards), 0 for shared-memory copies made by the same CPU cores.
  double overlap = 1.0;
  std::array<OpCost, kNumCollectiveOps> ops{};  // measured per-operation overrides
  // Effective bus bandwidth and per-step latency of `op` on this link.
  double op_bandwidth(CollectiveOp op) const;
  double op_latency(CollectiveOp op) const;
};

struct ClusterProfile {
  std::string name;
  DeviceProfile device;
  int64_t gpus_per_node = 8;
  int64_t max_nodes = 0;  // 0: as many as asked for
  LinkProfile intra;      // inside a node
  LinkProfile inter;      // between nodes
  std::string source;
  std::string path;  // the file it was read from ("builtin:clusters/NAME.toml")
  // GPUs of the whole cluster when the name asked for a size ("a100x64" -> 64); 0 otherwise.
  int64_t gpus() const { return max_nodes > 0 ? max_nodes * gpus_per_node : 0; }
};

// A built-in profile by name ("a100-80gb-x8-ib200", an alias such as "a100", or either with a
// GPU count: "a100x64" is the a100 cluster limited to 64 GPUs) or a path to a TOML file; the
// error lists the built-in names.
ClusterProfile load_cluster_profile(const std::string& name_or_path);
std::vector<std::string> builtin_cluster_profiles();
// Aliases, as "alias -> name" lines.
std::vector<std::string> builtin_cluster_aliases();

// Parses a cluster profile from TOML text; `source` names the file in messages. A device named
// by string is looked up among the built-in devices (or, for a file, as a path beside it).
ClusterProfile parse_cluster_profile(const std::string& toml_text, const std::string& source);
DeviceProfile load_device_profile(const std::string& name_or_path);
std::vector<std::string> builtin_device_profiles();

// The built-in files (generated from profiles/ at build time): {relative path, TOML text}.
struct EmbeddedFile {
  const char* path;  // "devices/a100-80gb.toml", "clusters/h100-x8-ib400.toml"
  const char* text;
};
const std::vector<EmbeddedFile>& embedded_profile_files();

}  // namespace strata
