// Writes tests/fixtures/quant/: blocks of Q5_0, Q5_1, Q2_K, Q3_K and Q5_K made by ggml itself,
// and ggml's own dequantization of them (ggml_get_type_traits(type)->to_float), for
// tests/model/quant_test.cpp to compare Troupe's dequantize_row with bit for bit. Built and run
// by scripts/make-quant-fixtures.sh against llama.cpp's libggml-base.
//
// Per type, one third of the blocks each:
//   - from ggml's reference quantizer (from_float_ref) on random floats,
//   - from ggml_quantize_chunk (the searching quantizer llama-quantize uses) on random floats,
//   - random bytes with the fp16 scale fields set to random finite values, so that every bit
//     of every field is exercised (quantizers leave some patterns rare or unused).
// The floats are normal with a per-row offset and spread, so that affine types' mins vary.
//
// Usage: quant_fixtures OUT_DIR    writes OUT_DIR/<type>.blocks and OUT_DIR/<type>.f32
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ggml.h"

namespace {

struct type_case {
  ggml_type type;
  const char* file;
  int n_blocks;  // a multiple of 3
  std::vector<size_t> fp16_fields;  // byte offsets of the block's fp16 scale fields
};

bool write_file(const std::string& path, const void* p, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  const bool ok = std::fwrite(p, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  // Offsets of d (and m / dmin) in ggml-common.h's block structs.
  const std::vector<type_case> cases = {
      {GGML_TYPE_Q5_0, "q5_0", 288, {0}},
      {GGML_TYPE_Q5_1, "q5_1", 288, {0, 2}},
      {GGML_TYPE_Q2_K, "q2_k", 48, {80, 82}},
      {GGML_TYPE_Q3_K, "q3_k", 48, {108}},
      {GGML_TYPE_Q5_K, "q5_k", 48, {0, 2}},
  };
  std::mt19937 rng(20260105);
  for (const auto& c : cases) {
    const auto* tr = ggml_get_type_traits(c.type);
    const int64_t bs = tr->blck_size;
    const size_t bytes = tr->type_size;
    const int third = c.n_blocks / 3;
    std::vector<uint8_t> blocks(bytes * static_cast<size_t>(c.n_blocks));

    // Rows of one block each (so every block gets its own offset and spread).
    std::vector<float> x(static_cast<size_t>(bs * third * 2));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> spread(0.01f, 2.0f), offset(-1.0f, 1.0f);
    for (int64_t b = 0; b < 2 * third; ++b) {
      const float s = spread(rng), o = offset(rng) * (b % 2 ? 0.0f : s);
      for (int64_t i = 0; i < bs; ++i) x[static_cast<size_t>(b * bs + i)] = o + s * normal(rng);
    }
    uint8_t* at = blocks.data();
    tr->from_float_ref(x.data(), at, bs * third);
    at += bytes * static_cast<size_t>(third);
    ggml_quantize_chunk(c.type, x.data() + bs * third, at, 0, third, bs, nullptr);
    at += bytes * static_cast<size_t>(third);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.1f, 0.1f);
    for (int b = 0; b < third; ++b, at += bytes) {
      for (size_t i = 0; i < bytes; ++i) at[i] = static_cast<uint8_t>(byte(rng));
      for (size_t off : c.fp16_fields) {
        const ggml_fp16_t h = ggml_fp32_to_fp16(scale(rng));
        std::memcpy(at + off, &h, sizeof h);
      }
    }

    std::vector<float> y(static_cast<size_t>(bs * c.n_blocks));
    tr->to_float(blocks.data(), y.data(), bs * c.n_blocks);
    if (!write_file(out + "/" + c.file + ".blocks", blocks.data(), blocks.size()) ||
        !write_file(out + "/" + c.file + ".f32", y.data(), y.size() * sizeof(float))) {
      std::fprintf(stderr, "cannot write %s/%s.*\n", out.c_str(), c.file);
      return 1;
    }
    std::printf("%s: %d blocks of %lld values\n", c.file, c.n_blocks, static_cast<long long>(bs));
  }
  ggml_quantize_free();
  return 0;
}
