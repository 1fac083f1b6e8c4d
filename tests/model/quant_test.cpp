#include "model/quant.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/detail/quant_blocks.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe::model;
namespace d = troupe::model::detail;

namespace {

std::vector<float> random_normal(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> quantize(ggml_type t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<float> dequantize(ggml_type t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

__attribute__((target("f16c"))) uint16_t hw_fp32_to_fp16(float f) { return _cvtss_sh(f, 0); }
__attribute__((target("f16c"))) float hw_fp16_to_fp32(uint16_t h) { return _cvtsh_ss(h); }

}  // namespace

// ---- scalar conversions -------------------------------------------------------------------

TEST(Quant, Fp16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
    } else {
      ASSERT_EQ(fp32_to_fp16(f), h) << h;
    }
  }
  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), 5.9604644775390625e-8f);  // smallest subnormal
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
}

// F16C is the ground truth (it is what ggml and every GGUF writer use on x86).
TEST(Quant, Fp16MatchesF16cOnEdgesAndRandomFloats) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = fp16_to_fp32(static_cast<uint16_t>(h));
    const float b = hw_fp16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(b)) {
      ASSERT_EQ(bits(a), bits(b)) << h;
    }
  }
  std::vector<float> probe = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f,
                              6.1035156e-5f, 6.1035152e-5f, 2.9802322e-8f, 2.9802326e-8f,
                              1.0f + 1.0f / 2048.0f,  // exact tie between two halves: to even
                              1.0f + 3.0f / 2048.0f, 1e-10f, INFINITY, -INFINITY};
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns over the whole half range and beyond, including subnormals.
    const uint32_t e = 90 + rng() % 60;
    probe.push_back(from_bits(((rng() & 1) << 31) | (e << 23) | (rng() & 0x7FFFFF)));
  }
  for (float f : probe) ASSERT_EQ(fp32_to_fp16(f), hw_fp32_to_fp16(f)) << f;
}

TEST(Quant, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, even stays
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3F808001)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
}

// ---- block layouts, checked element by element against the GGUF description ---------------

TEST(Quant, Q4_0LayoutLowNibblesFirstHalf) {
  d::block_q4_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(ggml_type::q4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f);
  }
}

TEST(Quant, Q4_1Layout) {
  d::block_q4_1 b{};
  b.d = fp32_to_fp16(0.25f);
  b.m = fp32_to_fp16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(ggml_type::q4_1, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.25f - 1.0f);
    EXPECT_EQ(y[j + 16], (15 - j) * 0.25f - 1.0f);
  }
  const uint8_t* raw = reinterpret_cast<const uint8_t*>(&b);
  EXPECT_EQ(raw[0] | (raw[1] << 8), fp32_to_fp16(0.25f));  // d first, then m, then qs
  EXPECT_EQ(raw[2] | (raw[3] << 8), fp32_to_fp16(-1.0f));
  EXPECT_EQ(raw[4], b.qs[0]);
}

TEST(Quant, Q8_0Layout) {
  d::block_q8_0 b{};
  b.d = fp32_to_fp16(2.0f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  float y[32];
  dequantize_row(ggml_type::q8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 2.0f);
}

// Element i of a Q4_K super-block, written from the format description rather than from the
// loop structure of the dequantizer: sub-block j = i / 32 lives in byte chunk j / 2 (low
// nibbles for even j, high for odd j); 6-bit scale/min j: for j < 4 the low 6 bits of bytes j
// and j + 4; for j >= 4 the nibbles of byte j + 4 plus the top 2 bits of bytes j - 4 and j.
static float q4_k_element(const d::block_q4_k& b, int i) {
  const int j = i / 32, l = i % 32;
  const uint8_t byte = b.qs[32 * (j / 2) + l];
  const int q = (j % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
  int sc, m;
  if (j < 4) {
    sc = b.scales[j] & 63;
    m = b.scales[j + 4] & 63;
  } else {
    sc = (b.scales[j + 4] & 0x0F) | ((b.scales[j - 4] >> 6) << 4);
    m = (b.scales[j + 4] >> 4) | ((b.scales[j] >> 6) << 4);
  }
  return fp16_to_fp32(b.d) * static_cast<float>(sc) * static_cast<float>(q) -
         fp16_to_fp32(b.dmin) * static_cast<float>(m);
}

// Element i of a Q6_K super-block: half h = i / 128, quarter k = (i % 128) / 32, lane
// l = i % 32; low 4 bits from ql[64h + l + 32 (k & 1)] (low nibble for k < 2, high otherwise),
// high 2 bits from bits 2k..2k+1 of qh[32h + l]; scale of the 16-element group i / 16.
static float q6_k_element(const d::block_q6_k& b, int i) {
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  const uint8_t lb = b.ql[64 * h + l + 32 * (k & 1)];
  const int lo = k < 2 ? (lb & 0x0F) : (lb >> 4);
  const int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
  return fp16_to_fp32(b.d) * static_cast<float>(b.scales[i / 16]) * static_cast<float>((lo | (hi << 4)) - 32);
}

TEST(Quant, Q4_KLayoutMatchesFormatDescription) {
  std::mt19937 rng(3);
  for (int rep = 0; rep < 20; ++rep) {
    d::block_q4_k b{};
    b.d = fp32_to_fp16(0.01f + 0.001f * rep);
    b.dmin = fp32_to_fp16(0.02f);
    for (auto& s : b.scales) s = static_cast<uint8_t>(rng());
    for (auto& q : b.qs) q = static_cast<uint8_t>(rng());
    float y[256];
    dequantize_row(ggml_type::q4_k, &b, y, 256);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], q4_k_element(b, i)) << i;
  }
}

TEST(Quant, Q6_KLayoutMatchesFormatDescription) {
  std::mt19937 rng(4);
  for (int rep = 0; rep < 20; ++rep) {
    d::block_q6_k b{};
    b.d = fp32_to_fp16(0.003f);
    for (auto& q : b.ql) q = static_cast<uint8_t>(rng());
    for (auto& q : b.qh) q = static_cast<uint8_t>(rng());
    for (auto& s : b.scales) s = static_cast<int8_t>(rng());
    float y[256];
    dequantize_row(ggml_type::q6_k, &b, y, 256);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], q6_k_element(b, i)) << i;
  }
  EXPECT_EQ(offsetof(d::block_q6_k, scales), 192u);
  EXPECT_EQ(offsetof(d::block_q6_k, d), 208u);
}

// ---- quantize -> dequantize round trips -----------------------------------------------------

struct round_trip_case {
  ggml_type type;
  // Largest error allowed per element, as a fraction of the largest |x| of its block (the
  // 32-element block, or the 256-element super-block for K-quants) ...
  double max_rel;
  // ... and bound on the RMS error over the row, as a fraction of the row's RMS.
  double rms_rel;
};

// Bounds: round-to-nearest on a uniform grid errs by at most half a step, plus what storing the
// scale as fp16 (relative error <= 2^-11) adds at the far end of the grid. Q8_0: step
// d = amax / 127, error <= d / 2 + 127 d 2^-11 = 0.562 d. Q4_0: the grid is [-8, 7] * amax / 8
// and the far end clamps, so up to one step, amax / 8 (+0.4%). Q4_1: step (max - min) / 15 <=
// 2 amax / 15, half of it 0.067 amax, plus fp16 rounding of d and m, < 0.001 amax. K-quants
// also round the sub-block scales (6 or 8 bits), which can push an element outside its grid by
// a few percent of amax (measured: Q4_K 0.065, Q6_K 0.017), hence the looser values. Q5_0 and
// Q5_1 are Q4_0's and Q4_1's rules on twice the levels: amax / 16 (+0.4%) and amax / 31 (+fp16).
// Q5_K, Q3_K and Q2_K round their sub-block scales as Q4_K does (measured: 0.032, 0.22, 0.31;
// Q2_K's 4 levels and 4-bit scales and Q3_K's 8 levels are coarse by design). RMS bounds are
// ~1.5x what these quantizers measure on this data (Q8_0 0.0054, Q4_0 0.086, Q4_1 0.078, Q4_K
// 0.079, Q6_K 0.018, Q5_0 0.043, Q5_1 0.038, Q5_K 0.038, Q3_K 0.15, Q2_K 0.36, relative to the
// data's RMS), so a broken layout or rounding rule fails them by a wide margin.
class RoundTrip : public ::testing::TestWithParam<round_trip_case> {};

TEST_P(RoundTrip, ErrorWithinBounds) {
  const auto c = GetParam();
  const int64_t block = traits_of(c.type)->block_size == 256 ? 256 : 32;
  for (int64_t n : {int64_t{256}, int64_t{1536}}) {
    const auto x = random_normal(static_cast<size_t>(n), static_cast<uint32_t>(n) + 11, 0.7f);
    const auto y = dequantize(c.type, quantize(c.type, x), n);
    double se = 0.0, sx = 0.0;
    for (int64_t b = 0; b < n; b += block) {
      float amax = 0.0f;
      for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
      for (int64_t i = b; i < b + block; ++i) {
        const double e = std::fabs(static_cast<double>(x[static_cast<size_t>(i)]) - y[static_cast<size_t>(i)]);
        ASSERT_LE(e, c.max_rel * amax + 1e-7) << type_name(static_cast<uint32_t>(c.type)) << " i=" << i;
        se += e * e;
        sx += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
      }
    }
    EXPECT_LE(std::sqrt(se / sx), c.rms_rel) << type_name(static_cast<uint32_t>(c.type));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, RoundTrip,
    ::testing::Values(round_trip_case{ggml_type::f32, 0.0, 0.0},
                      round_trip_case{ggml_type::f16, 1.0 / 2048, 5e-4},
                      round_trip_case{ggml_type::bf16, 1.0 / 256, 4e-3},
                      round_trip_case{ggml_type::q8_0, 0.57 / 127, 0.008},
                      round_trip_case{ggml_type::q4_0, 1.01 / 8, 0.13},
                      round_trip_case{ggml_type::q4_1, 0.075, 0.12},
                      round_trip_case{ggml_type::q4_k, 0.10, 0.12},
                      round_trip_case{ggml_type::q6_k, 0.03, 0.028},
                      round_trip_case{ggml_type::q5_0, 1.01 / 16, 0.065},
                      round_trip_case{ggml_type::q5_1, 0.035, 0.057},
                      round_trip_case{ggml_type::q5_k, 0.045, 0.057},
                      round_trip_case{ggml_type::q3_k, 0.26, 0.23},
                      round_trip_case{ggml_type::q2_k, 0.40, 0.53}),
    [](const auto& info) { return std::string(type_name(static_cast<uint32_t>(info.param.type))); });

TEST(Quant, ConstantAndZeroRowsSurvive) {
  for (ggml_type t : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k,
                      ggml_type::q5_0, ggml_type::q5_1, ggml_type::q2_k, ggml_type::q3_k, ggml_type::q5_k}) {
    std::vector<float> zeros(256, 0.0f);
    for (float v : dequantize(t, quantize(t, zeros), 256)) ASSERT_EQ(v, 0.0f) << type_name(static_cast<uint32_t>(t));
    std::vector<float> ones(256, 1.0f);
    for (float v : dequantize(t, quantize(t, ones), 256)) ASSERT_NEAR(v, 1.0f, 0.02f) << type_name(static_cast<uint32_t>(t));
  }
}

TEST(Quant, DotReferenceIsDequantizedDot) {
  const auto w = random_normal(512, 21);
  const auto x = random_normal(512, 22);
  for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q4_0, ggml_type::q4_1,
                      ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k, ggml_type::q5_0, ggml_type::q5_1,
                      ggml_type::q2_k, ggml_type::q3_k, ggml_type::q5_k}) {
    const auto q = quantize(t, w);
    const auto y = dequantize(t, q, 512);
    double expect = 0.0;
    for (size_t i = 0; i < 512; ++i) expect += static_cast<double>(y[i]) * x[i];
    EXPECT_NEAR(dot_reference(t, q.data(), x.data(), 512), expect, 1e-4) << type_name(static_cast<uint32_t>(t));
  }
}

// ---- bit for bit against ggml ---------------------------------------------------------------

namespace {

std::vector<uint8_t> read_fixture(const std::string& rel) {
  std::ifstream in(troupe::test::fixture(rel), std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

// tests/fixtures/quant/<type>.blocks hold blocks made by ggml (its reference quantizer, the
// searching quantizer llama-quantize uses, and random bytes under random fp16 scales) and
// <type>.f32 what ggml's dequantize_row_* makes of them (scripts/make-quant-fixtures.sh).
// Every float must be the same bits: a file's weights must mean to Troupe what they mean to
// llama.cpp.
class MatchesGgml : public ::testing::TestWithParam<ggml_type> {};

TEST_P(MatchesGgml, DequantizeRowBitForBit) {
  const ggml_type t = GetParam();
  std::string name = type_name(static_cast<uint32_t>(t));
  std::transform(name.begin(), name.end(), name.begin(), [](char c) { return static_cast<char>(std::tolower(c)); });
  const auto blocks = read_fixture("quant/" + name + ".blocks");
  const auto floats = read_fixture("quant/" + name + ".f32");
  const auto* tr = traits_of(t);
  ASSERT_FALSE(blocks.empty()) << "missing fixture quant/" << name << ".blocks";
  ASSERT_EQ(blocks.size() % tr->block_bytes, 0u);
  const int64_t n = static_cast<int64_t>(blocks.size() / tr->block_bytes) * tr->block_size;
  ASSERT_GE(n / tr->block_size, 48);
  ASSERT_EQ(floats.size(), static_cast<size_t>(n) * sizeof(float));
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, blocks.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t want;
    std::memcpy(&want, floats.data() + 4 * i, 4);
    ASSERT_EQ(bits(y[static_cast<size_t>(i)]), want)
        << name << " block " << i / tr->block_size << " element " << i % tr->block_size << ": "
        << y[static_cast<size_t>(i)] << " vs ggml's " << from_bits(want);
  }
  // A row dequantized in parts gives the same floats (blocks are independent).
  std::vector<float> part(static_cast<size_t>(tr->block_size));
  const size_t last = blocks.size() - tr->block_bytes;
  dequantize_row(t, blocks.data() + last, part.data(), tr->block_size);
  EXPECT_EQ(std::memcmp(part.data(), y.data() + (n - tr->block_size), part.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(
    ConvertedTypes, MatchesGgml,
    ::testing::Values(ggml_type::q5_0, ggml_type::q5_1, ggml_type::q2_k, ggml_type::q3_k, ggml_type::q5_k),
    [](const auto& info) { return std::string(type_name(static_cast<uint32_t>(info.param))); });

// Element i of a Q3_K super-block from the format description: group i / 16 has the 6-bit
// scale sc (low 4 bits in byte g % 8 of `scales`, low nibble for g < 8; top 2 bits at bit
// 2 (g / 4) of byte 8 + g % 4), value d * (sc - 32) * (q - 4), q = 2 bits of qs plus 4 * hbit.
static float q3_k_element(const d::block_q3_k& b, int i) {
  const int g = i / 16, h = i / 128, k = (i % 128) / 32, l = i % 32;
  const int lo4 = g < 8 ? (b.scales[g] & 0x0F) : (b.scales[g - 8] >> 4);
  const int sc = (lo4 | (((b.scales[8 + g % 4] >> (2 * (g / 4))) & 3) << 4)) - 32;
  const int q2 = (b.qs[32 * h + l] >> (2 * k)) & 3;
  const int hb = (b.hmask[l] >> (4 * h + k)) & 1;
  return fp16_to_fp32(b.d) * static_cast<float>(sc) * static_cast<float>(q2 + 4 * hb - 4);
}

// The quantizers write what the format describes: every element the quantizer stores reads
// back through the description as it does through dequantize_row (which matches ggml above).
TEST(Quant, Q3_KQuantizerWritesTheDescribedLayout) {
  const auto x = random_normal(1024, 31);
  const auto q = quantize(ggml_type::q3_k, x);
  const auto y = dequantize(ggml_type::q3_k, q, 1024);
  for (int sb = 0; sb < 4; ++sb) {
    d::block_q3_k b;
    std::memcpy(&b, q.data() + sb * sizeof b, sizeof b);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[static_cast<size_t>(256 * sb + i)], q3_k_element(b, i)) << i;
  }
}
