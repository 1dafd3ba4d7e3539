// Tests of the .npy reader used to load reference logits.
#include "tests/support/npy.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fixtures.h"

namespace doppler::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Writes a version-1.0 .npy with the given dict text, padded to `align` bytes as numpy does.
void WriteNpy(const fs::path& p, const std::string& dict, const std::string& payload, size_t align = 64) {
  std::string header = dict;
  while ((10 + header.size() + 1) % align != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header + payload;
  std::ofstream(p, std::ios::binary).write(out.data(), static_cast<std::streamsize>(out.size()));
}

std::string FloatBytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

TEST(Npy, ReadsFixtureArrays) {
  absl::StatusOr<NpyArray> a = ReadNpy(FixturesDir() / "quant/input_f32.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{64, 512}));
  ASSERT_EQ(a->data.size(), 64u * 512u);
  for (int c = 0; c < 512; ++c) EXPECT_EQ(a->data[56 * 512 + c], 0.0f);  // row 56 is all zeros
  for (int c = 0; c < 512; ++c) EXPECT_EQ(a->data[57 * 512 + c], 0.5f);  // row 57 is constant 0.5

  absl::StatusOr<NpyArray> logits = ReadNpy(FixturesDir() / "hf/llama/prefill_logits.npy");
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->shape, (std::vector<int64_t>{24, 512}));
  for (float x : logits->data) ASSERT_TRUE(std::isfinite(x));
}

TEST(Npy, HeaderLengthIsNotAssumed) {
  const fs::path dir = MakeTempDir("npy");
  const std::vector<float> v = {1.5f, -2.0f, 3.25f};
  WriteNpy(dir / "a.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", FloatBytes(v), 16);
  absl::StatusOr<NpyArray> a = ReadNpy(dir / "a.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, std::vector<int64_t>{3});
  EXPECT_EQ(a->data, v);
  // Keys in another order, a 3-D shape, a 0-d scalar.
  WriteNpy(dir / "b.npy", "{'shape': (1, 3, 1), 'fortran_order': False, 'descr': '<f4'}", FloatBytes(v), 256);
  a = ReadNpy(dir / "b.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{1, 3, 1}));
  WriteNpy(dir / "c.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", FloatBytes({7.0f}));
  a = ReadNpy(dir / "c.npy");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->shape.empty());
  EXPECT_EQ(a->data, std::vector<float>{7.0f});
  fs::remove_all(dir);
}

TEST(Npy, Errors) {
  const fs::path dir = MakeTempDir("npy_err");
  const std::string three = FloatBytes({1, 2, 3});
  WriteNpy(dir / "be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", three);
  EXPECT_THAT(std::string(ReadNpy(dir / "be.npy").status().message()), HasSubstr("'>f4'"));
  WriteNpy(dir / "f8.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", three + three);
  EXPECT_THAT(std::string(ReadNpy(dir / "f8.npy").status().message()), HasSubstr("'<f8'"));
  WriteNpy(dir / "fo.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }", three);
  EXPECT_THAT(std::string(ReadNpy(dir / "fo.npy").status().message()), HasSubstr("Fortran"));
  WriteNpy(dir / "short.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", three);
  EXPECT_THAT(std::string(ReadNpy(dir / "short.npy").status().message()), HasSubstr("needs 16 data bytes"));
  std::ofstream(dir / "junk.npy") << "not numpy at all";
  absl::Status st = ReadNpy(dir / "junk.npy").status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("junk.npy"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("magic"));
  EXPECT_EQ(ReadNpy(dir / "missing.npy").status().code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace doppler::test
