#include <gtest/gtest.h>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/temp_dir.h"

namespace strata::io {

namespace {

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// Two shards the way transformers saves them, with an index naming where each tensor lives.
struct ShardedModel {
  TempDir dir;
  float a[2] = {1, 2};
  float b[3] = {3, 4, 5};
  uint16_t c[1] = {0x3f80};
  ShardedModel() {
    write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                      {{"a", DType::f32, {2}, a}, {"c", DType::bf16, {1}, c}});
    write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"b", DType::f32, {3}, b}});
    write_index(R"({"metadata": {"total_size": 22}, "weight_map": {
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors",
        "c": "model-00001-of-00002.safetensors"}})");
  }
  void write_index(const std::string& json) { write_file_atomic(index(), json); }
  std::string index() const { return dir.file("model.safetensors.index.json"); }
};

}  // namespace

TEST(SafetensorsSharded, FindsTensorsAcrossShards) {
  ShardedModel m;
  for (const std::string& path : {m.dir.path(), m.index()}) {
    ShardedSafetensors model = ShardedSafetensors::open(path);
    EXPECT_EQ(model.num_shards(), 2u);
    EXPECT_EQ(model.names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_TRUE(model.has("b"));
    EXPECT_FALSE(model.has("d"));
    float b[3];
    model.read_into("b", Tensor(b, DType::f32, {3}));
    EXPECT_EQ(b[2], 5.0f);
    EXPECT_EQ(model.info("c").dtype, DType::bf16);
    EXPECT_EQ(model.shard_of("c").path(), m.dir.file("model-00001-of-00002.safetensors"));
    EXPECT_HAS(error_of([&] { model.info("d"); }), "no tensor named 'd'");
  }
}

TEST(SafetensorsSharded, OpensASingleFileModel) {
  TempDir dir;
  float x[2] = {7, 8};
  write_safetensors(dir.file("model.safetensors"), {{"x", DType::f32, {2}, x}});
  for (const std::string& path : {dir.path(), dir.file("model.safetensors")}) {
    ShardedSafetensors model = ShardedSafetensors::open(path);
    EXPECT_EQ(model.num_shards(), 1u);
    float y[2];
    model.read_into("x", y, sizeof y);
    EXPECT_EQ(y[1], 8.0f);
  }
}

TEST(SafetensorsSharded, MissingShardNamesShardAndIndex) {
  ShardedModel m;
  m.write_index(R"({"weight_map": {"a": "gone.safetensors"}})");
  const std::string msg = error_of([&] { ShardedSafetensors::open(m.dir.path()); });
  EXPECT_HAS(msg, m.dir.file("gone.safetensors"));
  EXPECT_HAS(msg, m.index());
}

TEST(SafetensorsSharded, TensorAbsentFromItsShard) {
  ShardedModel m;
  m.write_index(R"({"weight_map": {"b": "model-00001-of-00002.safetensors"}})");
  const std::string msg = error_of([&] { ShardedSafetensors::open(m.index()); });
  EXPECT_HAS(msg, "'b'");
  EXPECT_HAS(msg, "does not contain it");
}

TEST(SafetensorsSharded, BadIndexNamesIt) {
  ShardedModel m;
  m.write_index("{not json");
  EXPECT_HAS(error_of([&] { ShardedSafetensors::open(m.index()); }), m.index());
  m.write_index(R"({"weights": {}})");
  EXPECT_HAS(error_of([&] { ShardedSafetensors::open(m.index()); }), "weight_map");
  m.write_index(R"({"weight_map": {"a": 1}})");
  EXPECT_HAS(error_of([&] { ShardedSafetensors::open(m.index()); }), "not a file name");
}

// Shards sit beside the index: a weight_map naming a path elsewhere is refused, not opened.
TEST(SafetensorsSharded, ShardOutsideTheModelDirectoryIsRefused) {
  ShardedModel m;
  for (const char* shard : {"../model-00001-of-00002.safetensors", "/etc/passwd", "..", ""}) {
    m.write_index(std::string(R"({"weight_map": {"a": ")") + shard + R"("}})");
    EXPECT_HAS(error_of([&] { ShardedSafetensors::open(m.index()); }), "beside the index");
  }
  // A number out of range, and a deeply nested index, are errors naming it (core/json.h), not
  // an escaped nlohmann exception or a stack overflow.
  m.write_index(R"({"weight_map": {"a": 1e999}})");
  EXPECT_HAS(error_of([&] { ShardedSafetensors::open(m.index()); }), m.index());
  m.write_index(R"({"weight_map": )" + std::string(100000, '[') + std::string(100000, ']') + "}");
  EXPECT_HAS(error_of([&] { ShardedSafetensors::open(m.index()); }), m.index());
}

TEST(SafetensorsSharded, EmptyDirectoryIsAnError) {
  TempDir dir;
  EXPECT_HAS(error_of([&] { ShardedSafetensors::open(dir.path()); }), "holds neither");
}

}  // namespace strata::io
