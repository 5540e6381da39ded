#include <gtest/gtest.h>

#include <string>

#include "io/checksum.h"

namespace strata::io {

// Known answers from the reference implementation (xxhsum / python-xxhash, XXH64). The inputs
// cover every path of the algorithm: empty, 1-3 tail bytes, a 4-byte tail, 8-byte lanes, and
// full 32-byte stripes (39 and 1024 bytes).
TEST(XxHash64, KnownAnswers) {
  EXPECT_EQ(xxhash64(""), 0xef46db3751d8e999ull);
  EXPECT_EQ(xxhash64("a"), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(xxhash64("abc"), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(xxhash64("Nobody inspects the spammish repetition"), 0xfbcea83c8a378bf1ull);
  std::string ramp;
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < 256; ++i) ramp.push_back(static_cast<char>(i));
  EXPECT_EQ(xxhash64(ramp), 0x6f3914f18fe4df57ull);
}

TEST(XxHash64, KnownAnswersWithSeed) {
  const uint64_t seed = 0x9e3779b1;
  EXPECT_EQ(xxhash64("", seed), 0xac75fda2929b17efull);
  EXPECT_EQ(xxhash64("a", seed), 0x393da8b78992279bull);
  EXPECT_EQ(xxhash64("abc", seed), 0x1318df30094a85fdull);
  EXPECT_EQ(xxhash64("Nobody inspects the spammish repetition", seed), 0x56db22dd5b051147ull);
}

TEST(XxHash64, StreamingMatchesOneShotAtEverySplit) {
  std::string data;
  for (int i = 0; i < 200; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  const uint64_t want = xxhash64(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    XxHash64 h;
    h.update(data.data(), split);
    h.update(data.data() + split, data.size() - split);
    ASSERT_EQ(h.finish(), want) << "split at " << split;
  }
  // Byte-at-a-time, and finish() in the middle does not disturb the state.
  XxHash64 h;
  for (size_t i = 0; i < data.size(); ++i) {
    h.update(&data[i], 1);
    if (i == 50) {
      EXPECT_EQ(h.finish(), xxhash64(data.substr(0, 51)));
    }
  }
  EXPECT_EQ(h.finish(), want);
  h.update(nullptr, 0);
  EXPECT_EQ(h.finish(), want);
}

TEST(XxHash64, HexIsSixteenLowercaseDigits) {
  EXPECT_EQ(hex64(0xef46db3751d8e999ull), "ef46db3751d8e999");
  EXPECT_EQ(hex64(0x1ull), "0000000000000001");
  EXPECT_EQ(hex64(0), "0000000000000000");
}

}  // namespace strata::io
