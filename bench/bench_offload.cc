// Optimizer-state offload benchmark: AdamW with its state in memory next to OffloadedAdamW with
// master weights and moments in files, on the same parameters and gradients in one process.
// Prints ms per step for both, the slowdown, the share of the offloaded step spent waiting for
// I/O, the I/O bandwidth, and the resident bytes of master + optimizer state (arena.current).
// Two runs of the offloaded step: "cached" (the state files sit in the page cache, as they do
// when RAM is larger than the state: this measures the pipeline, not the disk) and "cold reads"
// (before each step the files are flushed and dropped from the page cache, so every read goes to
// the disk; writes still land in the page cache and are written back in the background).
// Usage: bench_offload [dir] [elements]   (default: a new temp dir, 32M elements, ~100 segments)
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/error.h"
#include "optim/adamw.h"
#include "optim/offload.h"

namespace {

using strata::Arena;
using strata::MemCategory;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t resident(const Arena& arena) {
  return arena.current(MemCategory::master) + arena.current(MemCategory::optimizer);
}

// Writes the files back and drops them from the page cache, so that the next reads hit the disk.
void drop_cache(const std::string& dir) {
  for (const char* name : {"master.bin", "exp_avg.bin", "exp_avg_sq.bin"}) {
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

struct Timing {
  double step_s = 0, wait_s = 0;
  int64_t bytes = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  bool own_dir = false;
  if (argc > 1 && std::strlen(argv[1]) > 0) {
    dir = argv[1];
  } else {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "strata_bench_offload_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::fprintf(stderr, "bench_offload: cannot create a temporary directory\n");
      return 1;
    }
    dir = pattern;
    own_dir = true;
  }
  const int64_t elements = argc > 2 ? std::atoll(argv[2]) : int64_t{32} << 20;
  constexpr int kSegments = 100, kIters = 5;
  if (elements < 64 * kSegments) {
    std::fprintf(stderr, "bench_offload: elements must be at least %d\n", 64 * kSegments);
    return 1;
  }
  try {
    // ~100 segments of varied sizes (matrices with weight decay, small vectors without), each
    // padded to a multiple of 64 elements in the state, like a flat parameter layout.
    std::mt19937 rng(1);
    std::vector<int64_t> sizes(kSegments);
    double total_weight = 0;
    std::vector<double> weights(kSegments);
    for (int i = 0; i < kSegments; ++i) {
      weights[i] = (i % 4 == 3) ? 0.01 : 1.0 + static_cast<double>(rng() % 100) / 50.0;
      total_weight += weights[i];
    }
    int64_t state_size = 0;
    for (int i = 0; i < kSegments; ++i) {
      sizes[i] = std::max<int64_t>(
          1, static_cast<int64_t>(weights[i] / total_weight *
                                  static_cast<double>(elements - 64 * kSegments)));
      state_size += (sizes[i] + 63) / 64 * 64;
    }
    std::vector<float> p_ref(state_size), p_off(state_size), grads(state_size);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (int64_t i = 0; i < state_size; i += 4096) p_ref[i] = dist(rng);  // sparse: fast to fill
    p_off = p_ref;
    std::vector<strata::OptimSegment> seg_ref, seg_off;
    int64_t offset = 0;
    for (int i = 0; i < kSegments; ++i) {
      const bool wd = i % 4 != 3;
      seg_ref.push_back({p_ref.data() + offset, grads.data() + offset, sizes[i], wd, offset});
      seg_off.push_back({p_off.data() + offset, grads.data() + offset, sizes[i], wd, offset});
      offset += (sizes[i] + 63) / 64 * 64;
    }
    for (int64_t i = 0; i < state_size; ++i)
      grads[i] = 1e-3f * static_cast<float>((i * 7919) % 2001 - 1000);

    const strata::OptimConfig config;
    Arena arena_ref, arena_off;
    strata::AdamW ref(seg_ref, state_size, arena_ref, config);
    strata::OffloadOptions options;
    options.dir = dir;
    strata::OffloadedAdamW off(seg_off, state_size, arena_off, config, options);
    off.init_from_params();

    // One warm-up step each (page faults in the moments, file pages), then alternate.
    ref.step(1e-4f, 0.9f);
    off.step(1e-4f, 0.9f);
    Timing t_ref, t_cached, t_cold;
    for (int it = 0; it < kIters; ++it) {
      double t0 = now();
      ref.step(1e-4f, 0.9f);
      t_ref.step_s += now() - t0;
      t0 = now();
      off.step(1e-4f, 0.9f);
      t_cached.step_s += now() - t0;
      t_cached.wait_s += off.last_io_wait_s();
      t_cached.bytes += off.last_io_bytes();
    }
    for (int it = 0; it < kIters; ++it) {
      ref.step(1e-4f, 0.9f);  // keeps the two in step for the equality check
      drop_cache(dir);
      const double t0 = now();
      off.step(1e-4f, 0.9f);
      t_cold.step_s += now() - t0;
      t_cold.wait_s += off.last_io_wait_s();
      t_cold.bytes += off.last_io_bytes();
    }
    const bool equal = std::memcmp(p_ref.data(), p_off.data(), p_ref.size() * sizeof(float)) == 0;

    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("state: %lld elements in %d segments, chunk %lld elements x %d buffers, dir %s\n",
                static_cast<long long>(state_size), kSegments,
                static_cast<long long>(options.chunk_elements), options.buffers, dir.c_str());
    std::printf("%-22s %10s %9s %10s %12s %14s\n", "", "ms/step", "slowdown", "io wait", "io GiB/s",
                "resident MiB");
    std::printf("%-22s %10.1f %9s %10s %12s %14.1f\n", "AdamW (in memory)",
                1e3 * t_ref.step_s / kIters, "1.00x", "-", "-",
                static_cast<double>(resident(arena_ref)) / (1 << 20));
    for (const auto& [name, t] :
         {std::pair{"offload (cached)", t_cached}, std::pair{"offload (cold reads)", t_cold}}) {
      std::printf("%-22s %10.1f %8.2fx %9.0f%% %12.2f %14.1f\n", name, 1e3 * t.step_s / kIters,
                  t.step_s / t_ref.step_s, 100.0 * t.wait_s / t.step_s,
                  static_cast<double>(t.bytes) / gib / t.step_s,
                  static_cast<double>(resident(arena_off)) / (1 << 20));
    }
    std::printf("params bitwise equal after %d steps: %s\n", 2 * kIters + 1, equal ? "yes" : "NO");
    if (own_dir) std::filesystem::remove_all(dir);
    return equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_offload: %s\n", e.what());
    if (own_dir) std::filesystem::remove_all(dir);
    return 1;
  }
}
