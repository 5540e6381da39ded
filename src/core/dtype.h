// Element types. f32 is the compute type today; bf16 and f16 are storage types whose conversions
// are here so that buffers, checkpoints and (later) kernels can carry them.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/error.h"

namespace strata {

enum class DType : uint8_t { f32, bf16, f16, i32, u16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::f16:
    case DType::u16:
      return 2;
  }
  return 0;
}

// Names as safetensors spells them.
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::u16:
      return "U16";
  }
  return "?";
}

inline DType dtype_from_name(std::string_view name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u16})
    if (dtype_name(t) == name) return t;
  fail("unknown dtype '", name, "' (expected F32, BF16, F16, I32 or U16)");
}

// f32 -> bf16 with round-to-nearest-even; NaN stays NaN (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace strata
