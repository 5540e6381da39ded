// Checksum throughput (src/io/checksum.h): XXH64 and XXH3 from libxxhash, streamed in 1 MiB
// pieces as checkpoint files are, over a buffer much larger than the caches (from memory) and
// over one that stays in L2 (the hash's own speed). Best of five runs each.
//
//   bench_checksum [MiB]            # default 1024: a 1 GiB buffer
// Prints one line per algorithm: GB/s from memory and from cache, and the digest.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "io/checksum.h"

using namespace strata;

namespace {

using Clock = std::chrono::steady_clock;

template <class Hash>
uint64_t hash_pieces(const unsigned char* data, size_t size, size_t piece, int repeat) {
  Hash h;
  for (int r = 0; r < repeat; ++r)
    for (size_t off = 0; off < size; off += piece)
      h.update(data + off, std::min(piece, size - off));
  return h.finish();
}

// GB/s of hashing `repeat` x `size` bytes, best of five, and the digest.
template <class Hash>
double rate(const std::vector<unsigned char>& buf, size_t size, int repeat, uint64_t* digest) {
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    const auto t0 = Clock::now();
    *digest = hash_pieces<Hash>(buf.data(), size, size_t{1} << 20, repeat);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return static_cast<double>(size) * repeat / best / 1e9;
}

template <class Hash>
void report(const char* name, const std::vector<unsigned char>& buf) {
  uint64_t memory_digest = 0, cache_digest = 0;
  const double memory = rate<Hash>(buf, buf.size(), 1, &memory_digest);
  const size_t cached = 256 << 10;
  const double cache =
      rate<Hash>(buf, cached, static_cast<int>((size_t{1} << 30) / cached), &cache_digest);
  std::printf("%-6s %6.2f GB/s from memory (%zu MiB)  %6.2f GB/s from cache (256 KiB)  %s\n", name,
              memory, buf.size() >> 20, cache, io::hex64(memory_digest).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? static_cast<size_t>(std::max(1, std::atoi(argv[1]))) : 1024;
  std::vector<unsigned char> buf(mib << 20);
  uint64_t x = 0x9e3779b97f4a7c15ull;  // any bytes; written so the pages are really there
  for (unsigned char& b : buf) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  report<io::XxHash64>("xxh64", buf);
  report<io::Xxh3Hash>("xxh3", buf);
}
