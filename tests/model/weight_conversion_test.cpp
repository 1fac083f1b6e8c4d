// Conversion of the types without matmul kernels to Q8_0: exactly dequantize-then-quantize, and
// an error far below the original type's own step.
#include "model/weight_conversion.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/detail/quant_blocks.hpp"
#include "model/quant.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::model;
namespace d = troupe::model::detail;

namespace {

const ggml_type k_converted[] = {ggml_type::q5_0, ggml_type::q5_1, ggml_type::q2_k, ggml_type::q3_k, ggml_type::q5_k};

std::string lower_name(ggml_type t) {
  std::string s = type_name(static_cast<uint32_t>(t));
  std::transform(s.begin(), s.end(), s.begin(), [](char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// ggml-made blocks (tests/fixtures/quant/README.md): the first two thirds come from ggml's
// quantizers, the last third is random bytes.
std::vector<uint8_t> fixture_blocks(ggml_type t) {
  std::ifstream in(troupe::test::fixture("quant/" + lower_name(t) + ".blocks"), std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The grid step of each element of one block, from the format description: Q5_0 / Q5_1 |d|;
// Q5_K d * sc of its sub-block of 32; Q3_K |d * (sc - 32)| and Q2_K d * (sc & 15) of its group of 16.
std::vector<float> steps_of(ggml_type t, const uint8_t* block) {
  std::vector<float> s(static_cast<size_t>(traits_of(t)->block_size));
  switch (t) {
    case ggml_type::q5_0: {
      d::block_q5_0 b;
      std::memcpy(&b, block, sizeof b);
      std::fill(s.begin(), s.end(), std::fabs(fp16_to_fp32(b.d)));
      break;
    }
    case ggml_type::q5_1: {
      d::block_q5_1 b;
      std::memcpy(&b, block, sizeof b);
      std::fill(s.begin(), s.end(), std::fabs(fp16_to_fp32(b.d)));
      break;
    }
    case ggml_type::q5_k: {
      d::block_q5_k b;
      std::memcpy(&b, block, sizeof b);
      for (int i = 0; i < 256; ++i) {
        uint8_t sc, m;
        q4_k_scale_min(b.scales, i / 32, &sc, &m);
        s[static_cast<size_t>(i)] = std::fabs(fp16_to_fp32(b.d) * sc);
      }
      break;
    }
    case ggml_type::q3_k: {
      d::block_q3_k b;
      std::memcpy(&b, block, sizeof b);
      for (int i = 0; i < 256; ++i) {
        const int g = i / 16;
        const int lo4 = g < 8 ? (b.scales[g] & 0x0F) : (b.scales[g - 8] >> 4);
        const int sc = (lo4 | (((b.scales[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
        s[static_cast<size_t>(i)] = std::fabs(fp16_to_fp32(b.d) * static_cast<float>(sc));
      }
      break;
    }
    case ggml_type::q2_k: {
      d::block_q2_k b;
      std::memcpy(&b, block, sizeof b);
      for (int i = 0; i < 256; ++i) s[static_cast<size_t>(i)] = std::fabs(fp16_to_fp32(b.d) * (b.scales[i / 16] & 0x0F));
      break;
    }
    default:
      ADD_FAILURE() << "no step rule for " << lower_name(t);
  }
  return s;
}

}  // namespace

TEST(WeightConversion, RowIsDequantizedThenQuantizedAsQ8_0) {
  for (ggml_type t : k_converted) {
    const auto blocks = fixture_blocks(t);
    ASSERT_FALSE(blocks.empty()) << lower_name(t);
    const auto* tr = traits_of(t);
    const int64_t n = static_cast<int64_t>(blocks.size() / tr->block_bytes) * tr->block_size;
    ASSERT_EQ(n % 256, 0);
    std::vector<float> x(static_cast<size_t>(n));
    dequantize_row(t, blocks.data(), x.data(), n);
    std::vector<uint8_t> want(row_bytes(ggml_type::q8_0, n)), got(want.size());
    quantize_row(ggml_type::q8_0, x.data(), want.data(), n);
    convert_row_to_q8_0(t, blocks.data(), got.data(), n);
    EXPECT_EQ(got, want) << lower_name(t);
  }
}

// Q8_0 rounds each value to its block's grid of step amax / 127 (amax over 32 values), so it
// errs by at most half a step plus what storing the step as fp16 adds: 0.562 * amax / 127.
// Against the original type's own step the error is small because a 5-bit (or smaller) grid
// spanning zero covers at most 32 of its steps, while Q8_0's covers 254 of its own: at most
// 0.562 * 32 / 127 = 0.142 of the original step. (An affine block whose values all sit far
// from zero can exceed that; weights are centred on zero.) Measured on the blocks ggml's
// quantizers made from the fixtures' floats, half of whose blocks are offset from zero by up
// to their spread: Q5_0 0.067, Q5_1 0.099, Q2_K 0.025, Q3_K 0.032, Q5_K 0.103 of a step: a
// fifth of each type's own rounding error (half a step) at worst.
TEST(WeightConversion, ErrorIsFarBelowTheTypesStep) {
  for (ggml_type t : k_converted) {
    const auto blocks = fixture_blocks(t);
    ASSERT_FALSE(blocks.empty()) << lower_name(t);
    const auto* tr = traits_of(t);
    const int64_t bs = tr->block_size;
    const int64_t n_blocks = static_cast<int64_t>(blocks.size() / tr->block_bytes) * 2 / 3;  // quantizer-made
    const int64_t n = n_blocks * bs;
    std::vector<float> orig(static_cast<size_t>(n)), conv(static_cast<size_t>(n));
    dequantize_row(t, blocks.data(), orig.data(), n);
    std::vector<uint8_t> q8(row_bytes(ggml_type::q8_0, n));
    convert_row_to_q8_0(t, blocks.data(), q8.data(), n);
    dequantize_row(ggml_type::q8_0, q8.data(), conv.data(), n);
    double worst = 0.0;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const auto steps = steps_of(t, blocks.data() + static_cast<size_t>(b) * tr->block_bytes);
      for (int64_t i0 = 0; i0 < bs; i0 += 32) {
        float amax = 0.0f;
        for (int64_t i = i0; i < i0 + 32; ++i) amax = std::max(amax, std::fabs(orig[static_cast<size_t>(b * bs + i)]));
        for (int64_t i = i0; i < i0 + 32; ++i) {
          const auto k = static_cast<size_t>(b * bs + i);
          const double err = std::fabs(static_cast<double>(conv[k]) - orig[k]);
          ASSERT_LE(err, 0.562 * amax / 127 + 1e-9) << lower_name(t) << " element " << k;
          if (steps[static_cast<size_t>(i)] > 0.0f) worst = std::max(worst, err / steps[static_cast<size_t>(i)]);
        }
      }
    }
    std::printf("%s -> Q8_0: max error %.4f of the type's step\n", type_name(static_cast<uint32_t>(t)).c_str(), worst);
    EXPECT_LT(worst, 0.142) << lower_name(t);
    EXPECT_GT(worst, 0.0) << lower_name(t);  // the measure measured something
  }
}
