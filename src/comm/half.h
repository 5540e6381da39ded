// IEEE binary16 (f16) <-> f32, in software so that the comm layer's reductions need no F16C or
// _Float16 support. core/dtype.h has the bf16 pair; f16 lives here until a kernel needs it too.
#pragma once
#include <cstdint>
#include <cstring>

namespace strata::comm {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in f32.
    const float f = static_cast<float>(mant) * 0x1p-24f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);  // inf, or NaN with its payload
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; overflow goes to infinity, NaN stays NaN (quiet).
inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: rounds to inf
  if (a < 0x38800000u) {
    // Below the smallest normal (2^-14): adding 0.5 puts the f16 subnormal grid (2^-24) at the
    // f32 ulp, so the hardware's round-to-nearest-even does the rounding.
    float x;
    std::memcpy(&x, &a, 4);
    x += 0.5f;
    uint32_t v;
    std::memcpy(&v, &x, 4);
    return static_cast<uint16_t>(sign | (v - 0x3f000000u));
  }
  const uint32_t odd = (a >> 13) & 1u;
  a += 0xc8000fffu + odd;  // rebias the exponent (-112 << 23, mod 2^32) and round
  return static_cast<uint16_t>(sign | (a >> 13));
}

}  // namespace strata::comm
