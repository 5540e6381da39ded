#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/checksum.h"

namespace strata::io {

namespace {

// The test buffer of xxHash's own self-test (cli/xsum_sanity_check.c, XSUM_fillTestBuffer): byte
// i is the top byte of PRIME32 * PRIME64^i.
std::string sanity_buffer(size_t len) {
  std::string out(len, '\0');
  uint64_t gen = 2654435761u;
  for (size_t i = 0; i < len; ++i) {
    out[i] = static_cast<char>(gen >> 56);
    gen *= 11400714785074694797ull;
  }
  return out;
}

}  // namespace

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

// xxHash's own known answers for XXH64 (cli/xsum_sanity_check.c, XSUM_XXH64_testdata), one-shot
// and streamed in one piece and byte by byte as that test does.
TEST(XxHash64, ReferenceSanityVectors) {
  const std::string buf = sanity_buffer(2367);
  const uint64_t prime32 = 2654435761u;
  const struct {
    size_t len;
    uint64_t seed, want;
  } cases[] = {{0, 0, 0xEF46DB3751D8E999ull},        {0, prime32, 0xAC75FDA2929B17EFull},
               {1, 0, 0xE934A84ADB052768ull},        {1, prime32, 0x5014607643A9B4C3ull},
               {4, 0, 0x9136A0DCA57457EEull},        {14, 0, 0x8282DCC4994E35C8ull},
               {14, prime32, 0xC3BD6BF63DEB6DF0ull}, {222, 0, 0xB641AE8CB691C174ull},
               {222, prime32, 0x20CB8AB7AE10C14Aull}};
  for (const auto& c : cases) {
    const std::string_view in(buf.data(), c.len);
    EXPECT_EQ(xxhash64(in, c.seed), c.want) << c.len << " bytes, seed " << c.seed;
    XxHash64 bytewise(c.seed);
    for (char ch : in) bytewise.update(&ch, 1);
    EXPECT_EQ(bytewise.finish(), c.want) << c.len << " bytes, seed " << c.seed;
  }
}

TEST(XxHash64, CopiesContinueIndependentlyAndMovesCarryTheState) {
  const std::string data = sanity_buffer(300);
  XxHash64 a;
  a.update(data.substr(0, 100));
  XxHash64 b = a;  // from byte 100
  a.update(data.substr(100));
  b.update(data.substr(100, 50));
  EXPECT_EQ(a.finish(), xxhash64(data));
  EXPECT_EQ(b.finish(), xxhash64(data.substr(0, 150)));
  b = a;
  EXPECT_EQ(b.finish(), xxhash64(data));
  XxHash64 c(std::move(a));
  EXPECT_EQ(c.finish(), xxhash64(data));
  a = c;  // a moved-from hash may be assigned to again
  a.update("x");
  EXPECT_EQ(a.finish(), xxhash64(data + "x"));
  EXPECT_EQ(c.finish(), xxhash64(data));
}

// xxHash's own known answers for XXH3 64-bit with seed 0 (XSUM_XXH3_testdata): every length
// class of the algorithm, up to three 1 KiB blocks with an overlapping last stripe.
TEST(Xxh3Hash, ReferenceSanityVectors) {
  const std::string buf = sanity_buffer(2367);
  const std::pair<size_t, uint64_t> cases[] = {
      {0, 0x2D06800538D394C2ull},   {1, 0xC44BDFF4074EECDBull},    {6, 0x27B56A84CD2D7325ull},
      {12, 0xA713DAF0DFBB77E7ull},  {24, 0xA3FE70BF9D3510EBull},   {48, 0x397DA259ECBA1F11ull},
      {80, 0xBCDEFBBB2C47C90Aull},  {195, 0xCD94217EE362EC3Aull},  {403, 0xCDEB804D65C6DEA4ull},
      {512, 0x617E49599013CB6Bull}, {2048, 0xDD59E2C3A5F038E0ull}, {2240, 0x6E73A90539CF2948ull},
      {2367, 0xCB37AEB9E5D361EDull}};
  for (const auto& [len, want] : cases) {
    const std::string_view in(buf.data(), len);
    EXPECT_EQ(xxh3_64(in), want) << len << " bytes";
    EXPECT_EQ(checksum(Checksum::xxh3, in.data(), in.size()), want) << len << " bytes";
    Xxh3Hash whole, bytewise;
    whole.update(in);
    for (char ch : in) bytewise.update(&ch, 1);
    EXPECT_EQ(whole.finish(), want) << len << " bytes";
    EXPECT_EQ(bytewise.finish(), want) << len << " bytes";
  }
}

TEST(Xxh3Hash, StreamingMatchesOneShotAtEverySplitAndFinishKeepsTheState) {
  const std::string data = sanity_buffer(2500);  // past one 1 KiB block and the 256-byte buffer
  const uint64_t want = xxh3_64(data);
  for (size_t split = 0; split <= data.size(); split += 7) {
    Xxh3Hash h;
    h.update(data.data(), split);
    EXPECT_EQ(h.finish(), xxh3_64(data.substr(0, split)));
    h.update(data.data() + split, data.size() - split);
    ASSERT_EQ(h.finish(), want) << "split at " << split;
  }
  Xxh3Hash h;
  h.update(data.substr(0, 1000));
  Xxh3Hash copy = h;
  h.update(data.substr(1000));
  copy.update(nullptr, 0);
  copy.update(data.substr(1000));
  EXPECT_EQ(h.finish(), want);
  EXPECT_EQ(copy.finish(), want);
  EXPECT_NE(want, xxhash64(data));
}

TEST(Checksum, NamesAndOneShotForms) {
  EXPECT_STREQ(checksum_name(Checksum::xxh64), "xxh64");
  EXPECT_STREQ(checksum_name(Checksum::xxh3), "xxh3");
  const std::string data = sanity_buffer(1000);
  EXPECT_EQ(checksum(Checksum::xxh64, data.data(), data.size()), xxhash64(data));
  EXPECT_EQ(checksum(Checksum::xxh64, nullptr, 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(checksum(Checksum::xxh3, nullptr, 0), 0x2D06800538D394C2ull);
}

TEST(Checksum, RecordedChecksumReadsEitherKeyAndRefusesAmbiguity) {
  const RecordedChecksum old = recorded_checksum({{"key", "a"}, {"xxh64", "ef46db3751d8e999"}});
  EXPECT_EQ(old.algorithm, Checksum::xxh64);
  EXPECT_EQ(old.value, 0xef46db3751d8e999ull);
  const RecordedChecksum now = recorded_checksum({{"xxh3", "2D06800538D394C2"}});
  EXPECT_EQ(now.algorithm, Checksum::xxh3);
  EXPECT_EQ(now.value, 0x2d06800538d394c2ull);
  for (const nlohmann::json& bad :
       {nlohmann::json{{"key", "a"}},
        nlohmann::json{{"xxh64", "ef46db3751d8e999"}, {"xxh3", "2d06800538d394c2"}},
        nlohmann::json{{"xxh3", "2d06800538d394c"}}, nlohmann::json{{"xxh3", "2d06800538d394cg"}},
        nlohmann::json{{"xxh64", 12}}, nlohmann::json::array()})
    EXPECT_THROW(recorded_checksum(bad), Error) << bad.dump();
}

TEST(XxHash64, HexIsSixteenLowercaseDigits) {
  EXPECT_EQ(hex64(0xef46db3751d8e999ull), "ef46db3751d8e999");
  EXPECT_EQ(hex64(0x1ull), "0000000000000001");
  EXPECT_EQ(hex64(0), "0000000000000000");
}

}  // namespace strata::io
