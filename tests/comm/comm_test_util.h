// Shared by the comm tests: the world communicator that the test main creates, and typed
// buffers whose elements are read and written as floats whatever the dtype, so that one
// reference computation serves f32, bf16 and f16.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/half.h"
#include "comm/mpi_comm.h"
#include "core/dtype.h"

namespace strata::testing {

// A duplicate of MPI_COMM_WORLD named "world", owned by the test main.
MpiComm& world();

class Buffer {
 public:
  Buffer(DType dtype, int64_t count)
      : dtype_(dtype), count_(count), bytes_(static_cast<size_t>(count) * dtype_size(dtype) + 1) {}
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  int64_t count() const { return count_; }
  DType dtype() const { return dtype_; }
  char* at(int64_t i) { return bytes_.data() + static_cast<size_t>(i) * dtype_size(dtype_); }

  void set(int64_t i, float v) {
    char* p = at(i);
    if (dtype_ == DType::f32) {
      std::memcpy(p, &v, 4);
    } else if (dtype_ == DType::i32) {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
    } else {
      const uint16_t h = dtype_ == DType::bf16 ? f32_to_bf16(v) : comm::f32_to_f16(v);
      std::memcpy(p, &h, 2);
    }
  }
  float get(int64_t i) const {
    const char* p = bytes_.data() + static_cast<size_t>(i) * dtype_size(dtype_);
    if (dtype_ == DType::f32) {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    if (dtype_ == DType::i32) {
      int32_t x;
      std::memcpy(&x, p, 4);
      return static_cast<float>(x);
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return dtype_ == DType::bf16 ? bf16_to_f32(h) : comm::f16_to_f32(h);
  }
  // The value as stored in this dtype (what set() followed by get() gives).
  float round(float v) const {
    if (dtype_ == DType::bf16) return bf16_to_f32(f32_to_bf16(v));
    if (dtype_ == DType::f16) return comm::f16_to_f32(comm::f32_to_f16(v));
    return v;
  }

 private:
  DType dtype_;
  int64_t count_;
  std::vector<char> bytes_;  // one spare byte so that count 0 still has an address
};

// Rank-dependent small integers in [-40, 40]: exact in bf16 and f16, and so are their sums over
// up to 4 ranks in any order (|sum| <= 160 < 256), so reductions can be compared exactly.
inline float input_value(int rank, int64_t i) {
  return static_cast<float>((i * 7 + rank * 13 + (i >> 5)) % 81) - 40.0f;
}

}  // namespace strata::testing
