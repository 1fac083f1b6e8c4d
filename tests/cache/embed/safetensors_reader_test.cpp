#include "cache/embed/safetensors_reader.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/support/safetensors_builder.hpp"

using troupe::cache::safetensors_file;
using troupe::test::safetensors_builder;

namespace {

safetensors_builder two_tensors() {
  safetensors_builder b;
  b.add_f32("w", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.add_f16("v", {4}, {0.5f, -1.0f, 2.0f, 0.0f});
  return b;
}

std::string error_of(std::vector<uint8_t> bytes) {
  auto f = safetensors_file::from_bytes(std::move(bytes), "t.safetensors");
  return f ? std::string("<no error>") : f.error();
}

}  // namespace

TEST(SafetensorsReader, ReadsTensorsAndMetadata) {
  auto f = safetensors_file::from_bytes(two_tensors().build());
  ASSERT_TRUE(f.ok()) << f.error();
  ASSERT_EQ(f.value()->tensors().size(), 2u);
  const auto* w = f.value()->tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, "F32");
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->bytes, 24u);
  float x;
  std::memcpy(&x, w->data + 5 * 4, 4);
  EXPECT_EQ(x, 6.0f);
  troupe::model::ggml_type t;
  ASSERT_TRUE(f.value()->tensor("v")->ggml_float_type(t));
  EXPECT_EQ(t, troupe::model::ggml_type::f16);
  EXPECT_EQ(f.value()->metadata().at("format"), "pt");
  EXPECT_EQ(f.value()->tensor("nope"), nullptr);
}

TEST(SafetensorsReader, OpensFilesAndNamesTheTruncation) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe-st-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto bytes = two_tensors().build();
  {
    std::ofstream(dir / "ok.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    std::ofstream(dir / "cut.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size() - 3));
  }
  auto ok = safetensors_file::open((dir / "ok.safetensors").string());
  EXPECT_TRUE(ok.ok()) << ok.error();
  auto cut = safetensors_file::open((dir / "cut.safetensors").string());
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.error().find("cut.safetensors"), std::string::npos) << cut.error();
  EXPECT_NE(cut.error().find("tensor 'v'"), std::string::npos) << cut.error();
  EXPECT_NE(cut.error().find("truncated"), std::string::npos) << cut.error();
  auto missing = safetensors_file::open((dir / "missing.safetensors").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("cannot open"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(SafetensorsReader, CorruptHeadersAreNamed) {
  EXPECT_NE(error_of({1, 2, 3}).find("less than the 8-byte header length"), std::string::npos);
  auto bytes = two_tensors().build();
  bytes[6] = 0x7f;  // header length ~ 2^55
  EXPECT_NE(error_of(bytes).find("implausible"), std::string::npos);
  bytes = two_tensors().build();
  bytes.resize(20);  // header cut short
  EXPECT_NE(error_of(bytes).find("truncated: the header needs"), std::string::npos) << error_of(bytes);

  safetensors_builder b = two_tensors();
  EXPECT_NE(error_of(b.with_header("{\"w\": [1, 2")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(b.with_header("[1, 2]   ")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(b.with_header("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}")).find("tensor 'w': missing or non-string dtype"),
            std::string::npos);
  EXPECT_NE(error_of(b.with_header("{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}")).find("unknown dtype Q4"),
            std::string::npos);
  EXPECT_NE(error_of(b.with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}")).find("need 8"),
            std::string::npos);
  EXPECT_NE(error_of(b.with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}")).find("end before they begin"),
            std::string::npos);
  EXPECT_NE(error_of(b.with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}")).find("shape"),
            std::string::npos);
  EXPECT_NE(error_of(b.with_header("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}")).find("data_offsets"),
            std::string::npos);
}
