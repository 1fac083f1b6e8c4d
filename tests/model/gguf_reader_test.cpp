#include "model/gguf_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>

#include <gtest/gtest.h>

#include "model/gguf_writer.hpp"

using namespace troupe::model;

namespace {

std::vector<uint8_t> sample_image() {
  gguf_writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_f32("llama.rope.freq_base", 10000.0f);
  w.set_bool("flag", true);
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "<s>"});
  w.set_i32_array("ints", {1, -2, 3});
  std::vector<uint8_t> data(4 * 8, 0);
  float one = 1.0f;
  std::memcpy(data.data(), &one, 4);
  w.add_tensor("t.weight", ggml_type::f32, {4, 2}, data);
  w.add_tensor("q.weight", ggml_type::q8_0, {32, 1}, std::vector<uint8_t>(34, 1));
  return w.to_bytes();
}

}  // namespace

TEST(GgufReader, RoundTripsMetadataAndTensors) {
  auto f = gguf_file::from_bytes(sample_image());
  ASSERT_TRUE(f.ok()) << f.error();
  auto& g = *f.value();
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(g.get_int("llama.block_count").value(), 2);
  EXPECT_DOUBLE_EQ(g.get_float("llama.rope.freq_base").value(), 10000.0);
  EXPECT_TRUE(g.get_bool("flag").value());
  auto toks = g.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(toks.ok());
  EXPECT_EQ(toks.value(), (std::vector<std::string>{"a", "b", "<s>"}));
  EXPECT_EQ(g.get_int_array("ints").value(), (std::vector<int64_t>{1, -2, 3}));
  ASSERT_EQ(g.tensors().size(), 2u);
  const auto* t = g.tensor("t.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->elements(), 8);
  EXPECT_EQ(t->rows(), 2);
  float first;
  std::memcpy(&first, t->data, 4);
  EXPECT_EQ(first, 1.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % g.alignment(), 0u);
  EXPECT_EQ(g.tensor("q.weight")->bytes, 34u);
}

TEST(GgufReader, MissingKeyAndWrongTypeNameTheKey) {
  auto f = gguf_file::from_bytes(sample_image());
  ASSERT_TRUE(f.ok());
  auto r = f.value()->get_int("llama.context_length");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("llama.context_length"), std::string::npos);
  auto s = f.value()->get_string("llama.block_count");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("not a string"), std::string::npos);
}

TEST(GgufReader, EveryTruncationIsAnErrorNotACrash) {
  auto img = sample_image();
  for (size_t n = 0; n < img.size(); ++n) {
    std::vector<uint8_t> part(img.begin(), img.begin() + static_cast<long>(n));
    auto f = gguf_file::from_bytes(part);
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
  }
}

TEST(GgufReader, TruncatedTensorDataNamesTheTensor) {
  auto img = sample_image();
  img.resize(img.size() - 10);
  auto f = gguf_file::from_bytes(img);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("truncated"), std::string::npos) << f.error();
  EXPECT_NE(f.error().find("q.weight"), std::string::npos) << f.error();
}

TEST(GgufReader, BadMagicAndVersion) {
  auto img = sample_image();
  img[0] = 'X';
  auto f = gguf_file::from_bytes(img);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("not a GGUF file"), std::string::npos);
  img = sample_image();
  img[4] = 9;
  f = gguf_file::from_bytes(img);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("version 9"), std::string::npos);
}

TEST(GgufReader, UnknownTensorTypeNamesTheTensor) {
  gguf_writer w;
  w.add_tensor("weird", static_cast<ggml_type>(77), {32}, std::vector<uint8_t>(64));
  auto f = gguf_file::from_bytes(w.to_bytes());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("weird"), std::string::npos);
  EXPECT_NE(f.error().find("77"), std::string::npos);
}

TEST(GgufReader, RandomCorruptionNeverCrashes) {
  auto img = sample_image();
  uint32_t seed = 12345;
  for (int iter = 0; iter < 2000; ++iter) {
    auto copy = img;
    for (int k = 0; k < 4; ++k) {
      seed = seed * 1664525u + 1013904223u;
      copy[seed % copy.size()] = static_cast<uint8_t>(seed >> 24);
    }
    auto f = gguf_file::from_bytes(copy);
    (void)f;  // ok or error, but never a crash or sanitizer report
  }
  SUCCEED();
}

TEST(GgufReader, MissingFileSaysSo) {
  auto f = gguf_file::open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("/nonexistent/model.gguf"), std::string::npos);
}

TEST(GgufReader, NamedPipeIsRefusedWithoutBlocking) {
  char dir[] = "/tmp/troupe_gguf_fifo_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/model.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pending = std::async(std::launch::async, [&] { return gguf_file::open(fifo); });
  const bool returned = pending.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!returned) {
    // A writer releases the open that waits for one, so the test fails instead of hanging.
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  auto f = pending.get();
  ::unlink(fifo.c_str());
  ::rmdir(dir);
  ASSERT_TRUE(returned) << "opening a named pipe blocked";
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find(fifo), std::string::npos) << f.error();
  EXPECT_NE(f.error().find("not a regular file (a named pipe)"), std::string::npos) << f.error();
}

TEST(GgufReader, DirectoryIsRefusedByName) {
  auto f = gguf_file::open("/tmp");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("'/tmp' is not a regular file (a directory)"), std::string::npos) << f.error();
}

TEST(GgufReader, ReadsTheTokenizerFixtures) {
  auto f = gguf_file::open(std::string(TROUPE_FIXTURES) + "/tokenizer/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f.value()->get_string("tokenizer.ggml.model").value(), "gpt2");
  EXPECT_GT(f.value()->get_string_array("tokenizer.ggml.tokens").value().size(), 50000u);
}

// Metadata arrays cost ~50 bytes an element in memory against a byte in the file: a 40 MB
// array of u8 took 2.4 GB. All arrays together are capped (1 << 22 elements), a real
// tokenizer's ~1.5 million well under it.
TEST(GgufReader, MetadataArraysTooLargeInAllAreRefusedBeforeTheyAreRead) {
  gguf_writer w;
  w.set_string("general.architecture", "llama");
  w.set_i32_array("a", std::vector<int32_t>(3'000'000, 1));
  w.set_i32_array("b", std::vector<int32_t>(1'000'000, 2));
  ASSERT_TRUE(gguf_file::from_bytes(w.to_bytes()).ok()) << "4 million elements: allowed";
  w.set_i32_array("c", std::vector<int32_t>(200'000, 3));
  auto f = gguf_file::from_bytes(w.to_bytes());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("metadata arrays hold more than 4194304 elements"), std::string::npos) << f.error();
}
