#include "io/checksum.h"

#include <xxhash.h>

#include <new>
#include <nlohmann/json.hpp>

#include "core/error.h"

#if defined(__x86_64__)
// The library's XXH3 loops compiled for every x86 level, chosen at run time (AVX2 hashes ~3x as
// fast as the SSE2 baseline that plain XXH3_64bits_update runs); the digest is the same whatever
// code computed it. On aarch64 the library's own loop is NEON.
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define STRATA_XXH3_UPDATE XXH3_64bits_update_dispatch
#define STRATA_XXH3_ONE_SHOT XXH3_64bits_dispatch
#else
#define STRATA_XXH3_UPDATE XXH3_64bits_update
#define STRATA_XXH3_ONE_SHOT XXH3_64bits
#endif

namespace strata::io {

namespace {

template <class T>
T* checked(T* state) {
  if (!state) throw std::bad_alloc();
  return state;
}

}  // namespace

void XxHash64::Free::operator()(XXH64_state_s* s) const {
  XXH64_freeState(s);
}

XxHash64::XxHash64(uint64_t seed) : state_(checked(XXH64_createState())) {
  XXH64_reset(state_.get(), seed);
}

XxHash64::XxHash64(const XxHash64& other) : state_(checked(XXH64_createState())) {
  XXH64_copyState(state_.get(), other.state_.get());
}

XxHash64& XxHash64::operator=(const XxHash64& other) {
  if (this != &other) {
    if (!state_) state_.reset(checked(XXH64_createState()));
    XXH64_copyState(state_.get(), other.state_.get());
  }
  return *this;
}

void XxHash64::update(const void* data, size_t size) {
  if (size == 0) return;  // data may be null then, which the library need not see
  XXH64_update(state_.get(), data, size);
}

uint64_t XxHash64::finish() const {
  return XXH64_digest(state_.get());
}

void Xxh3Hash::Free::operator()(XXH3_state_s* s) const {
  XXH3_freeState(s);
}

Xxh3Hash::Xxh3Hash() : state_(checked(XXH3_createState())) {
  XXH3_64bits_reset(state_.get());
}

Xxh3Hash::Xxh3Hash(const Xxh3Hash& other) : state_(checked(XXH3_createState())) {
  XXH3_copyState(state_.get(), other.state_.get());
}

Xxh3Hash& Xxh3Hash::operator=(const Xxh3Hash& other) {
  if (this != &other) {
    if (!state_) state_.reset(checked(XXH3_createState()));
    XXH3_copyState(state_.get(), other.state_.get());
  }
  return *this;
}

void Xxh3Hash::update(const void* data, size_t size) {
  if (size == 0) return;
  STRATA_XXH3_UPDATE(state_.get(), data, size);
}

uint64_t Xxh3Hash::finish() const {
  return XXH3_64bits_digest(state_.get());
}

uint64_t xxhash64(std::string_view bytes, uint64_t seed) {
  return XXH64(bytes.data(), bytes.size(), seed);
}

uint64_t xxh3_64(std::string_view bytes) {
  return STRATA_XXH3_ONE_SHOT(bytes.data(), bytes.size());
}

const char* checksum_name(Checksum algorithm) {
  return algorithm == Checksum::xxh3 ? "xxh3" : "xxh64";
}

uint64_t checksum(Checksum algorithm, const void* data, size_t size) {
  return algorithm == Checksum::xxh3 ? STRATA_XXH3_ONE_SHOT(data, size) : XXH64(data, size, 0);
}

RecordedChecksum recorded_checksum(const nlohmann::json& object) {
  const auto short_dump = [&] { return object.dump().substr(0, 160); };
  STRATA_CHECK(object.is_object(), "expected a JSON object with a checksum, got ", short_dump());
  const bool has64 = object.contains("xxh64"), has3 = object.contains("xxh3");
  STRATA_CHECK(has64 != has3, has64 ? "both an xxh64 and an xxh3 checksum" : "no checksum",
               " (one of the keys xxh64, xxh3) in ", short_dump());
  const Checksum algorithm = has3 ? Checksum::xxh3 : Checksum::xxh64;
  const nlohmann::json& v = object.at(checksum_name(algorithm));
  const std::string hex = v.is_string() ? v.get<std::string>() : "";
  STRATA_CHECK(hex.size() == 16 && hex.find_first_not_of("0123456789abcdefABCDEF") == hex.npos,
               "checksum ", checksum_name(algorithm), " is not 16 hex digits in ", short_dump());
  return {algorithm, std::stoull(hex, nullptr, 16)};
}

std::string hex64(uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[static_cast<size_t>(i)] = kDigits[value & 15];
  return out;
}

}  // namespace strata::io
