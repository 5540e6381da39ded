// index.json and state.json as files from outside: every malformed one is CheckpointCorrupt (or
// an Error) naming the file, never an escaped nlohmann exception, an overflow or an allocation of
// what the file claims. The cases are what fuzzing found or what its checks ask (tests/fuzz:
// fuzz_checkpoint_index, fuzz_checkpoint_state).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "train/checkpoint.h"

namespace strata {
namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

template <typename Fn>
std::string corrupt_error(Fn&& fn) {
  try {
    fn();
  } catch (const CheckpointCorrupt& e) {
    EXPECT_EQ(e.file(), "ckpt/x.json");
    return e.what();
  }
  return "<no CheckpointCorrupt>";
}

nlohmann::json slice() {
  return {{"tensor", "layers.0.attn.q.weight"},
          {"global_shape", {8, 4}},
          {"block_shape", {4, 4}},
          {"slice_dim", 0},
          {"slice_begin", 4},
          {"begin", 0},
          {"count", 16},
          {"file", "rank_00001.safetensors"},
          {"key", "k"},
          {"xxh3", "0000000000000000"}};
}

std::string index_error(const nlohmann::json& s) {
  const nlohmann::json j = {{"format", "strata-checkpoint-v3"}, {"slices", {s}}};
  return corrupt_error([&] { parse_checkpoint_index(j.dump(), "ckpt/x.json"); });
}

TEST(CheckpointParse, GoodIndexAndState) {
  const nlohmann::json j = {{"format", "strata-checkpoint-v3"}, {"slices", {slice()}}};
  EXPECT_EQ(parse_checkpoint_index(j.dump(), "i").size(), 1u);
  const CheckpointState s =
      parse_checkpoint_state(R"({"step": 7, "config": {}, "data": {"epoch": 0}})", "s");
  EXPECT_EQ(s.step, 7);
  EXPECT_EQ(s.data["epoch"], 0);
}

TEST(CheckpointParse, InconsistentSliceEntries) {
  const auto with = [](const char* key, const nlohmann::json& value) {
    nlohmann::json s = slice();
    s[key] = value;
    return s;
  };
  for (const nlohmann::json& s :
       {with("slice_dim", -2), with("slice_dim", 2), with("begin", -1), with("count", 17),
        with("begin", INT64_MAX), with("count", INT64_MAX), with("slice_begin", 5),
        with("slice_begin", -4), with("block_shape", {4, 5}), with("block_shape", {-4, -4}),
        with("global_shape", {INT64_MAX, INT64_MAX}), with("block_shape", {4}),
        with("file", "../rank_00001.safetensors"), with("file", "/etc/passwd"), with("file", ""),
        with("count", "16"), with("tensor", nullptr),
        // Found by fuzz_checkpoint_index (regress-float-count): a float became an integer
        // through an out-of-range cast; a slice_dim of 2^32 - 1 was truncated to -1.
        with("count", 1e308), with("begin", 0.5), with("block_shape", {4.0, 4}),
        with("slice_dim", 4294967295LL)})
    EXPECT_HAS(index_error(s), "checkpoint index");
}

TEST(CheckpointParse, MalformedStateIsCorruptNotATypeError) {
  for (const char* text :
       {"[]", "{}", R"({"step": "7", "config": {}})", R"({"step": -1, "config": {}})",
        R"({"step": 7})", R"({"step": 7, "config": 3})", R"({"step": 1e999, "config": {}})",
        "{\"step\": 7, \"config\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[}",
        "not json"})
    EXPECT_HAS(corrupt_error([&] { parse_checkpoint_state(text, "ckpt/x.json"); }),
               "checkpoint state 'ckpt/x.json'");
}

}  // namespace
}  // namespace strata
