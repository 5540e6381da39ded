// Compatibility with the Hugging Face Python library. tests/io/check_safetensors_python.py sets
// STRATA_SAFETENSORS_INTEROP_DIR, writes from_python.safetensors there, runs this test, and then
// checks from_strata.safetensors; without the variable (plain ctest) the test is skipped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "io/safetensors.h"

namespace strata::io {

TEST(SafetensorsInterop, ReadsPythonWritesForPython) {
  const char* dir = std::getenv("STRATA_SAFETENSORS_INTEROP_DIR");
  if (dir == nullptr) GTEST_SKIP() << "run tests/io/check_safetensors_python.py";
  const std::string base = dir;

  SafetensorsFile f = SafetensorsFile::open(base + "/from_python.safetensors");
  EXPECT_EQ(f.metadata().at("source"), "python");
  std::vector<float> f32(6);
  f.read_into("f32", Tensor(f32.data(), DType::f32, {2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f32[i], 0.5f * i - 1.0f);
  std::vector<uint16_t> bf16(4);
  f.read_into("bf16", Tensor(bf16.data(), DType::bf16, {4}));
  const float want_bf16[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bf16_to_f32(bf16[i]), want_bf16[i]);
  std::vector<int32_t> i32(3);
  f.read_into("i32", Tensor(i32.data(), DType::i32, {3}));
  EXPECT_EQ(i32, (std::vector<int32_t>{1, -2, 2147483647}));
  EXPECT_EQ(f.info("empty").shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(f.dtype_name_of("i64"), "I64");

  std::vector<float> w = {0.25f, -1.5f, 3.0f, 1e-20f, 42.0f, -0.0f};
  std::vector<uint16_t> h = {f32_to_bf16(1.0f), f32_to_bf16(-3.0f)};
  std::vector<int32_t> ids = {5, -7, 0};
  write_safetensors(base + "/from_strata.safetensors",
                    {{"w", DType::f32, {3, 2}, w.data()},
                     {"h", DType::bf16, {2}, h.data()},
                     {"ids", DType::i32, {3}, ids.data()},
                     {"nothing", DType::f32, {0}, nullptr}},
                    {{"source", "strata"}, {"step", "7"}});
}

}  // namespace strata::io
