// The CUDA backend's CopyQueue and page-locked host memory (kernels/backend.h) against the CPU
// backend's: the same script of chunked uploads, kernels and downloads gives bitwise the same
// host results, which only holds if every ordering rule of the contract holds on the GPU's
// separate copy streams (a download sees the compute queued before it, an upload does not
// overwrite what earlier compute still reads, compute after compute_waits_for sees the upload).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "device_buffer.h"
#include "gpu_test.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

namespace strata {
namespace {

constexpr int64_t kCount = (int64_t{1} << 22) + 37;  // 16 MiB + a ragged tail: copies take a while
constexpr int64_t kChunks = 7;

struct HostBuffer {  // Backend::alloc_host, freed with the test
  HostBuffer(Backend& be, int64_t count)
      : backend(be), data(static_cast<float*>(be.alloc_host(static_cast<size_t>(count) * 4))) {}
  ~HostBuffer() { backend.free_host(data); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  Backend& backend;
  float* data;
};

// The script: returns what the host sees at its end (first download, then second download).
std::vector<float> script(Backend& be) {
  Arena arena(be.memory());
  HostBuffer in(be, kCount), out(be, kCount), out2(be, kCount);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(in.data) % Backend::kHostAlignment, 0u);
  EXPECT_EQ(in.data[0], 0.0f);
  EXPECT_EQ(in.data[kCount - 1], 0.0f);  // zero-filled
  const std::vector<float> x = cuda::testing::random_floats(kCount, 5);
  std::memcpy(in.data, x.data(), x.size() * sizeof(float));
  float* dev = arena.alloc<float>(MemCategory::workspace, kCount, "dev");
  float* kept = arena.alloc<float>(MemCategory::workspace, kCount, "kept");
  std::unique_ptr<CopyQueue> q = be.make_copy_queue();
  const int64_t per = (kCount + kChunks - 1) / kChunks;
  auto chunks = [&](auto fn) {
    CopyTicket last = 0;
    for (int64_t at = 0; at < kCount; at += per)
      last = fn(at, std::min(per, kCount - at) * int64_t{sizeof(float)});
    return last;
  };

  // Chunked upload; the kernel waits for the last one (uploads complete in order).
  CopyTicket up = chunks([&](int64_t at, int64_t bytes) {
    return q->upload(dev + at, in.data + at, static_cast<size_t>(bytes));
  });
  q->compute_waits_for(up);
  be.scale_inplace(dev, 2.0f, kCount);  // exact: dev = 2x
  be.copy(kept, dev, kCount * sizeof(float));
  // Downloads see the kernels queued before them.
  CopyTicket down = chunks([&](int64_t at, int64_t bytes) {
    return q->download(out.data + at, dev + at, static_cast<size_t>(bytes));
  });
  // An upload queued after compute that reads its target does not overwrite it early: `kept`
  // was copied from dev before this upload, so it must still hold 2x. The downloads of dev are
  // in the other direction, ordered before the upload through the compute queue.
  q->compute_waits_for(down);
  q->wait_host(up);
  for (int64_t i = 0; i < kCount; ++i) in.data[i] = -x[static_cast<size_t>(i)];
  up = q->upload(dev, in.data, kCount * sizeof(float));
  q->compute_waits_for(up);
  be.add_inplace(kept, dev, kCount);  // 2x + (-x) = x, exactly
  q->wait_host(down);
  std::vector<float> result(out.data, out.data + kCount);
  down = q->download(out2.data, kept, kCount * sizeof(float));
  q->wait_host(down);
  result.insert(result.end(), out2.data, out2.data + kCount);
  return result;
}

TEST(CopyQueue, CpuScriptGivesTheExpectedValues) {
  const std::vector<float> got = script(cpu_backend());
  const std::vector<float> x = cuda::testing::random_floats(kCount, 5);
  for (int64_t i = 0; i < kCount; i += 4097) {
    EXPECT_EQ(got[static_cast<size_t>(i)], 2.0f * x[static_cast<size_t>(i)]) << i;
    EXPECT_EQ(got[static_cast<size_t>(kCount + i)], x[static_cast<size_t>(i)]) << i;
  }
}

TEST(CopyQueue, CudaMatchesCpuBitwise) {
  REQUIRE_GPU();
  const std::vector<float> want = script(cpu_backend());
  std::unique_ptr<Backend> gpu = make_cuda_backend(0);
  const std::vector<float> got = script(*gpu);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

// More copies than the ticket ring holds: old tickets (retired) and new ones can both be waited
// for, and the data of every copy arrives.
TEST(CopyQueue, CudaTicketsBeyondTheRing) {
  REQUIRE_GPU();
  std::unique_ptr<Backend> gpu = make_cuda_backend(0);
  {
    Arena arena(gpu->memory());
    constexpr int64_t n = 1000;
    HostBuffer in(*gpu, n), out(*gpu, n);
    for (int64_t i = 0; i < n; ++i) in.data[i] = static_cast<float>(i) + 0.5f;
    float* dev = arena.alloc<float>(MemCategory::workspace, n, "dev");
    std::unique_ptr<CopyQueue> q = gpu->make_copy_queue();
    std::vector<CopyTicket> tickets;
    for (int64_t i = 0; i < n; ++i) tickets.push_back(q->upload(dev + i, in.data + i, 4));
    q->wait_host(tickets.front());
    q->compute_waits_for(tickets.front());
    q->compute_waits_for(tickets.back());
    const CopyTicket d = q->download(out.data, dev, n * sizeof(float));
    q->wait_host(d);
    q->wait_host(0);  // "no copy"
    EXPECT_EQ(std::memcmp(out.data, in.data, n * sizeof(float)), 0);
    EXPECT_THROW(q->wait_host(d + 1), Error);  // never issued
  }
}

}  // namespace
}  // namespace strata
