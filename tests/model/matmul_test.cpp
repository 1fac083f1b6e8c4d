#include "model/matmul.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/detail/matmul_kernels.hpp"
#include "model/huge_pages.hpp"
#include "model/quant.hpp"

using namespace troupe::model;
namespace d = troupe::model::detail;

namespace {

std::vector<float> random_normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Activations with a few large channels, like real hidden states.
std::vector<float> activations(int64_t n_tok, int64_t n_in, uint32_t seed) {
  auto x = random_normal(static_cast<size_t>(n_tok * n_in), seed);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t i = 7; i < n_in; i += 97) x[static_cast<size_t>(t * n_in + i)] *= 12.0f;
  }
  return x;
}

struct matrix {
  ggml_type type;
  int64_t n_in, n_out;
  size_t stride;
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;  // what the weights really are, row-major
  weight_view view() const {
    return weight_view{type, bytes.data(), n_in, n_out, stride};
  }
};

matrix make_matrix(ggml_type type, int64_t n_in, int64_t n_out, uint32_t seed, size_t pad = 0) {
  matrix m{type, n_in, n_out, row_bytes(type, n_in) + pad, {}, {}};
  m.bytes.assign(m.stride * static_cast<size_t>(n_out), 0xEE);
  m.dequant.resize(static_cast<size_t>(n_in * n_out));
  const auto w = random_normal(static_cast<size_t>(n_in * n_out), seed);
  for (int64_t o = 0; o < n_out; ++o) {
    uint8_t* row = m.bytes.data() + static_cast<size_t>(o) * m.stride;
    quantize_row(type, w.data() + o * n_in, row, n_in);
    dequantize_row(type, row, m.dequant.data() + o * n_in, n_in);
  }
  return m;
}

bool is_block_quantized(ggml_type t) {
  return t != ggml_type::f32 && t != ggml_type::f16 && t != ggml_type::bf16;
}

// Allowed |matmul - exact| for output (t, o), from first principles:
//  * Quantized paths round each activation block of 32 to int8 with step d = amax / 127, and
//    keep d (and the block sum s = d * sum(q)) rounded to fp16 as ggml does, so each activation
//    is off by at most d / 2 + 127 d 2^-11 = 0.562 d and the dot by at most that times
//    sum_{i in b} |w_i| per block. The fp16 block sum enters Q4_1 / Q4_K through the block's min
//    term, |m| |s| 2^-11 with |m| <= max |w_i| (the min is itself a grid value) and
//    |s| <= sum |x_i| (+ rounding): at most 2^-10 max|w| sum|x| per block. That is the ~1e-2
//    relative error scale of int8 activations; a layout or scale bug gives errors of the order
//    of sum |w_i x_i| itself and fails by orders of magnitude.
//  * Float rounding: recursive float summation of n terms errs by at most n * 2^-24 *
//    sum |w_i x_i|; the kernels' lane-parallel sums do better, so this bound is safe.
double tolerance(const matrix& m, const float* x, int64_t o, bool activations_quantized) {
  const float* w = m.dequant.data() + o * m.n_in;
  double abs_dot = 0.0, quant = 0.0;
  for (int64_t b = 0; b < m.n_in; b += 32) {
    float amax = 0.0f, wmax = 0.0f;
    double wsum = 0.0, xsum = 0.0;
    for (int64_t i = b; i < std::min(m.n_in, b + 32); ++i) {
      amax = std::max(amax, std::fabs(x[i]));
      wmax = std::max(wmax, std::fabs(w[i]));
      wsum += std::fabs(w[i]);
      xsum += std::fabs(x[i]);
      abs_dot += std::fabs(static_cast<double>(w[i]) * x[i]);
    }
    quant += (0.5 + 127.0 / 2048.0) * amax / 127.0 * wsum + wmax * xsum / 1024.0;
  }
  const double rounding = (static_cast<double>(m.n_in) * 6e-8 + 1e-6) * abs_dot + 1e-6;
  return (activations_quantized ? quant * 1.001 : 0.0) + rounding;
}

void expect_close_to_reference(const matrix& m, const std::vector<float>& x, int64_t n_tok,
                               const std::vector<float>& got, bool activations_quantized,
                               const std::string& what) {
  std::vector<float> ref(static_cast<size_t>(n_tok * m.n_out));
  matmul_reference(m.view(), x.data(), n_tok, ref.data());
  double err2 = 0.0, tol2 = 0.0;
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t o = 0; o < m.n_out; ++o) {
      const size_t k = static_cast<size_t>(t * m.n_out + o);
      const double tol = tolerance(m, x.data() + t * m.n_in, o, activations_quantized);
      ASSERT_NEAR(got[k], ref[k], tol) << what << " t=" << t << " o=" << o;
      err2 += (static_cast<double>(got[k]) - ref[k]) * (static_cast<double>(got[k]) - ref[k]);
      tol2 += tol * tol;
    }
  }
  // The bound above is worst case (all rounding errors aligned). Independent rounding errors
  // add up like a random walk, ~0.1 of the bound for one block of 32 and less for longer rows,
  // so on average errors must stay well inside it; this catches subtle bugs (a misplaced scale)
  // that the per-output worst case alone could let through.
  if (activations_quantized) {
    EXPECT_LE(std::sqrt(err2 / tol2), 0.3) << what;
  }
}

std::vector<d::isa_kind> supported_isas() {
  std::vector<d::isa_kind> v;
  for (auto i : {d::isa_kind::scalar, d::isa_kind::avx2, d::isa_kind::avx512vnni}) {
    if (d::isa_supported(i)) v.push_back(i);
  }
  return v;
}

struct path_case {
  ggml_type type;
  d::isa_kind isa;
};

std::string case_name(const ::testing::TestParamInfo<path_case>& info) {
  return std::string(type_name(static_cast<uint32_t>(info.param.type))) + "_" + d::isa_name(info.param.isa);
}

std::vector<path_case> all_cases() {
  std::vector<path_case> v;
  for (auto t : {ggml_type::f32, ggml_type::f16, ggml_type::bf16, ggml_type::q4_0, ggml_type::q4_1,
                 ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
    for (auto i : {d::isa_kind::scalar, d::isa_kind::avx2, d::isa_kind::avx512vnni}) v.push_back({t, i});
  }
  return v;
}

}  // namespace

class MatmulPath : public ::testing::TestWithParam<path_case> {};

// Every (type, ISA) path against the float reference, over token counts that hit every tile
// remainder and both the fused and the pre-unpacked batch kernels (1, 3, 6, 17, 64), row
// counts that are not multiples of the 4-row tiles or the 16-row thread split, odd block counts
// per row, and 1 or 2 threads. One and two threads must agree bit for bit, since each row is
// computed by exactly one thread with the same code.
TEST_P(MatmulPath, MatchesReference) {
  const auto c = GetParam();
  if (!d::isa_supported(c.isa)) GTEST_SKIP() << d::isa_name(c.isa) << " not supported by this CPU";
  const bool kquant = c.type == ggml_type::q4_k || c.type == ggml_type::q6_k;
  const bool quantized_acts = is_block_quantized(c.type) && c.isa != d::isa_kind::scalar;
  std::vector<std::pair<int64_t, int64_t>> shapes;  // (n_in, n_out)
  if (kquant) {
    shapes = {{256, 37}, {512, 21}};
  } else if (is_block_quantized(c.type)) {
    shapes = {{32, 5}, {96, 37}, {576, 21}};
  } else {
    shapes = {{100, 37}, {576, 21}, {7, 3}};
  }
  thread_pool one(1), two(2);
  uint32_t seed = 1;
  for (auto [n_in, n_out] : shapes) {
    const auto m = make_matrix(c.type, n_in, n_out, ++seed);
    for (int64_t n_tok : {1, 3, 6, 17, 64}) {
      const auto x = activations(n_tok, n_in, ++seed);
      std::vector<float> y1(static_cast<size_t>(n_tok * n_out), NAN), y2 = y1;
      d::matmul_with_isa(c.isa, m.view(), x.data(), n_tok, y1.data(), one);
      d::matmul_with_isa(c.isa, m.view(), x.data(), n_tok, y2.data(), two);
      const std::string what = "n_in=" + std::to_string(n_in) + " n_out=" + std::to_string(n_out) +
                               " n_tok=" + std::to_string(n_tok);
      expect_close_to_reference(m, x, n_tok, y1, quantized_acts, what);
      ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float))) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPaths, MatmulPath, ::testing::ValuesIn(all_cases()), case_name);

TEST(Matmul, DefaultPathIsTheBestIsa) {
  const std::string isa = matmul_isa();
  EXPECT_TRUE(isa == "avx512vnni" || isa == "avx2" || isa == "scalar") << isa;
  EXPECT_EQ(isa, d::isa_name(d::best_isa()));
  const auto m = make_matrix(ggml_type::q4_1, 576, 40, 5);
  const auto x = activations(5, 576, 6);
  thread_pool pool(2);
  std::vector<float> a(200), b(200);
  matmul(m.view(), x.data(), 5, a.data(), pool);
  d::matmul_with_isa(d::best_isa(), m.view(), x.data(), 5, b.data(), pool);
  EXPECT_EQ(a, b);
}

// Wide rows and enough tokens that each thread walks the batch in several activation chunks;
// a padded row stride checks that kernels step by row_stride, not by the row's size.
TEST(Matmul, LargeBatchChunksAndRowStride) {
  thread_pool pool(2);
  for (auto t : {ggml_type::q4_1, ggml_type::q6_k, ggml_type::q8_0}) {
    const auto m = make_matrix(t, 2048, 9, 8, /*pad=*/64);
    const auto x = activations(130, 2048, 9);
    std::vector<float> y(130 * 9);
    matmul(m.view(), x.data(), 130, y.data(), pool);
    expect_close_to_reference(m, x, 130, y, d::best_isa() != d::isa_kind::scalar,
                              type_name(static_cast<uint32_t>(t)));
  }
}

// The SIMD activation quantizers must produce exactly what the scalar one does (both round
// half to even), so the kernels' accuracy analysis holds for all of them. 34 blocks: the
// AVX-512 one takes 16 blocks at a time (sharing their reductions), then one at a time.
TEST(Matmul, ActivationQuantizersAgree) {
  constexpr int64_t n = 34 * 32;
  auto x = activations(1, n, 12);
  x[0] = 0.0f;
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);      // an all-zero block
  std::fill(x.begin() + 1056, x.begin() + 1088, 0.0f);  // and one in the tail
  x[200] = 3e38f;                                       // a huge value (its block's codes: 127 and 0s)
  x[600] = -1e-30f;                                     // a tiny one
  x[1040] = -7.5f;                                      // the tail's largest
  std::vector<int8_t> q_ref(n), q(n);
  std::vector<float> d_ref(n / 32), s_ref(n / 32), dd(n / 32), ss(n / 32);
  std::vector<int32_t> sum_ref(n / 16), sum(n / 16);
  d::quantize_acts_scalar(x.data(), n, q_ref.data(), d_ref.data(), s_ref.data(), sum_ref.data());
  for (auto isa : supported_isas()) {
    const d::isa_kernels* k = isa == d::isa_kind::avx2         ? &d::avx2_kernels()
                              : isa == d::isa_kind::avx512vnni ? &d::avx512vnni_kernels()
                                                               : nullptr;
    if (!k) continue;
    k->quantize_acts(x.data(), n, q.data(), dd.data(), ss.data(), sum.data());
    EXPECT_EQ(q, q_ref) << d::isa_name(isa);
    EXPECT_EQ(sum, sum_ref) << d::isa_name(isa);
    EXPECT_EQ(dd, d_ref) << d::isa_name(isa);
    EXPECT_EQ(ss, s_ref) << d::isa_name(isa);
  }
}

TEST(Matmul, EmptyInputsDoNothing) {
  const auto m = make_matrix(ggml_type::q8_0, 64, 4, 1);
  thread_pool pool(2);
  std::vector<float> y(4, 1.5f);
  matmul(m.view(), nullptr, 0, y.data(), pool);
  EXPECT_EQ(y, std::vector<float>(4, 1.5f));
}

// Several matrices sharing one input (Q, K, V) in one call: each output must be exactly what a
// separate matmul gives, since every row goes through the same kernel either way. Mixed types
// and row counts that straddle the thread split exercise the row mapping.
TEST(Matmul, MultiMatchesSeparateCalls) {
  thread_pool pool(2);
  const matrix ms[] = {make_matrix(ggml_type::q4_1, 576, 40, 31), make_matrix(ggml_type::q8_0, 576, 13, 32),
                       make_matrix(ggml_type::f16, 576, 7, 33)};
  for (int64_t n_tok : {1, 17}) {
    const auto x = activations(n_tok, 576, 35);
    weight_view views[3];
    std::vector<float> got[3], want[3];
    float* outs[3];
    for (int i = 0; i < 3; ++i) {
      views[i] = ms[i].view();
      got[i].assign(static_cast<size_t>(n_tok * ms[i].n_out), NAN);
      want[i].assign(got[i].size(), NAN);
      outs[i] = got[i].data();
      matmul(views[i], x.data(), n_tok, want[i].data(), pool);
    }
    matmul_multi(views, outs, 3, x.data(), n_tok, pool);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(0, std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)))
          << "matrix " << i << " n_tok=" << n_tok;
    }
  }
}

// Q4_0, Q4_1 and Q8_0 follow llama.cpp's float order exactly (ggml_vec_dot_q*_q8_*: per row 8
// float lanes, lane l = elements 4l..4l+3 of a block, acc = fma(d_w * d_x, lane, acc) block after
// block; Q4_1's mins m * s added block by block; then ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)) + mins),
// so the SIMD paths must equal this plain-C++ statement of that order bit for bit, for any
// number of tokens (fused and pre-unpacked tiles) and any row count (odd pairs, remainders).
namespace {

float ggml_order_dot(ggml_type type, const uint8_t* row, const int8_t* q, const float* dx, const float* sx, int64_t nb) {
  float acc[8] = {};
  float mins = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t w[32];
    float dw = 0.0f;
    if (type == ggml_type::q8_0) {
      const uint8_t* blk = row + b * 34;
      dw = fp16_to_fp32(static_cast<uint16_t>(blk[0] | blk[1] << 8));
      for (int i = 0; i < 32; ++i) w[i] = static_cast<int8_t>(blk[2 + i]);
    } else {
      const bool has_min = type == ggml_type::q4_1;
      const uint8_t* blk = row + b * (has_min ? 20 : 18);
      dw = fp16_to_fp32(static_cast<uint16_t>(blk[0] | blk[1] << 8));
      const uint8_t* qs = blk + (has_min ? 4 : 2);
      for (int i = 0; i < 16; ++i) {
        w[i] = (qs[i] & 15) - (has_min ? 0 : 8);
        w[i + 16] = (qs[i] >> 4) - (has_min ? 0 : 8);
      }
      if (has_min) {
        const float m = fp16_to_fp32(static_cast<uint16_t>(blk[2] | blk[3] << 8));
        const float prod = m * sx[b];
        mins = mins + prod;
      }
    }
    const float d = dw * dx[b];
    for (int l = 0; l < 8; ++l) {
      int32_t sum = 0;
      for (int e = 4 * l; e < 4 * l + 4; ++e) sum += w[e] * q[b * 32 + e];
      acc[l] = std::fma(d, static_cast<float>(sum), acc[l]);
    }
  }
  const float r0 = acc[0] + acc[4], r1 = acc[1] + acc[5], r2 = acc[2] + acc[6], r3 = acc[3] + acc[7];
  return ((r0 + r2) + (r1 + r3)) + mins;
}

// The fast order's arithmetic for one (row, token), scalar: per block the exact integer dot
// product, times (weight scale * activation scale) in one FMA, then (Q4_1) min * block sum in
// another, block after block.
float fast_order_dot(ggml_type type, const uint8_t* row, const int8_t* q, const float* dx, const float* sx, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t w[32];
    float dw = 0.0f, m = 0.0f;
    const bool has_min = type == ggml_type::q4_1 || type == ggml_type::q4_k;
    if (type == ggml_type::q6_k) {  // two scales per block: each half's integer sum scaled on its own
      const uint8_t* blk = row + (b / 8) * 210;
      uint8_t v[256];
      q6_k_values(blk, v);
      const int e0 = 32 * static_cast<int>(b % 8);
      const float d = fp16_to_fp32(static_cast<uint16_t>(blk[208] | blk[209] << 8));
      for (int h = 0; h < 2; ++h) {
        int32_t sum = 0;
        for (int e = 16 * h; e < 16 * h + 16; ++e) sum += (v[e0 + e] - 32) * q[b * 32 + e];
        const float scale = d * static_cast<float>(static_cast<int8_t>(blk[192 + e0 / 16 + h]));
        acc = std::fma(static_cast<float>(sum), scale * dx[b], acc);
      }
      continue;
    }
    if (type == ggml_type::q4_k) {  // sub-block b % 8 of super-block b / 8: scale d * sc, min -dmin * m
      const uint8_t* blk = row + (b / 8) * 144;
      const int j = static_cast<int>(b % 8);
      uint8_t sc = 0, mn = 0;
      q4_k_scale_min(blk + 4, j, &sc, &mn);
      dw = fp16_to_fp32(static_cast<uint16_t>(blk[0] | blk[1] << 8)) * static_cast<float>(sc);
      m = -(fp16_to_fp32(static_cast<uint16_t>(blk[2] | blk[3] << 8)) * static_cast<float>(mn));
      const uint8_t* chunk = blk + 16 + 32 * (j / 2);
      for (int e = 0; e < 32; ++e) w[e] = j % 2 == 0 ? chunk[e] & 15 : chunk[e] >> 4;
    } else if (type == ggml_type::q8_0) {
      const uint8_t* blk = row + b * 34;
      dw = fp16_to_fp32(static_cast<uint16_t>(blk[0] | blk[1] << 8));
      for (int i = 0; i < 32; ++i) w[i] = static_cast<int8_t>(blk[2 + i]);
    } else {
      const uint8_t* blk = row + b * (has_min ? 20 : 18);
      dw = fp16_to_fp32(static_cast<uint16_t>(blk[0] | blk[1] << 8));
      if (has_min) m = fp16_to_fp32(static_cast<uint16_t>(blk[2] | blk[3] << 8));
      const uint8_t* qs = blk + (has_min ? 4 : 2);
      for (int i = 0; i < 16; ++i) {
        w[i] = (qs[i] & 15) - (has_min ? 0 : 8);
        w[i + 16] = (qs[i] >> 4) - (has_min ? 0 : 8);
      }
    }
    int32_t sum = 0;
    for (int e = 0; e < 32; ++e) sum += w[e] * q[b * 32 + e];
    acc = std::fma(static_cast<float>(sum), dw * dx[b], acc);
    if (has_min) acc = std::fma(m, sx[b], acc);
  }
  return acc;
}

// y (n_tok rows of m.n_out, from activations x) is dot's arithmetic bit for bit: each token
// quantized as the kernels quantize it, each output dot(its row, that token). label names the run.
using order_dot_fn = float (*)(ggml_type, const uint8_t*, const int8_t*, const float*, const float*, int64_t);
void expect_bits_of(order_dot_fn dot, ggml_type type, const matrix& m, const std::vector<float>& x, int64_t n_tok,
                    const std::vector<float>& y, const std::string& label) {
  const int64_t n_in = m.n_in, n_out = m.n_out, nb = n_in / 32;
  std::vector<int8_t> q(static_cast<size_t>(n_in));
  std::vector<float> dx(static_cast<size_t>(nb)), sx(static_cast<size_t>(nb));
  std::vector<int32_t> sums(static_cast<size_t>(2 * nb));
  for (int64_t t = 0; t < n_tok; ++t) {
    d::quantize_acts_scalar(x.data() + t * n_in, n_in, q.data(), dx.data(), sx.data(), sums.data());
    for (int64_t o = 0; o < n_out; ++o) {
      const float want = dot(type, m.bytes.data() + o * m.stride, q.data(), dx.data(), sx.data(), nb);
      const float got = y[static_cast<size_t>(t * n_out + o)];
      ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
          << label << " " << type_name(static_cast<uint32_t>(type)) << " n_in=" << n_in << " row " << o << " token "
          << t << ": " << got << " vs " << want;
    }
  }
}

}  // namespace

TEST(Matmul, BlockTypesSumInLlamaCppsOrderBitForBit) {
  thread_pool pool(2);
  for (auto type : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q8_0}) {
    for (auto [n_in, n_out] : std::vector<std::pair<int64_t, int64_t>>{{576, 21}, {96, 8}, {1536, 3}, {32, 1}}) {
      const auto m = make_matrix(type, n_in, n_out, 77);
      for (int64_t n_tok : {1, 3, 16, 17}) {
        const auto x = activations(n_tok, n_in, 78);
        for (auto isa : supported_isas()) {
          if (isa == d::isa_kind::scalar) continue;
          std::vector<float> y(static_cast<size_t>(n_tok * n_out));
          d::matmul_with_isa(isa, m.view(), x.data(), n_tok, y.data(), pool);
          expect_bits_of(ggml_order_dot, type, m, x, n_tok, y, d::isa_name(isa));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The fast order (weights packed 16 rows at a time): every output equals the scalar model of
// its arithmetic bit for bit, whatever the batch size, the row count (a last group of fewer
// than 16 rows), the thread split, and stays within the quantization bound of the exact product.
TEST(Matmul, FastOrderSumsWholeBlocksBitForBit) {
  thread_pool pool(2);
  for (auto type : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
    const auto shapes = type == ggml_type::q4_k || type == ggml_type::q6_k
                            ? std::vector<std::pair<int64_t, int64_t>>{{256, 40}, {512, 16}, {768, 3}, {256, 1}}
                            : std::vector<std::pair<int64_t, int64_t>>{{576, 40}, {96, 16}, {1536, 3}, {32, 1}, {64, 200}};
    for (auto [n_in, n_out] : shapes) {
      const auto m = make_matrix(type, n_in, n_out, 91);
      const packed_weights packed = pack_weights(m.view());
      if (!packed) GTEST_SKIP() << "no fast kernels on this CPU (" << matmul_isa() << ")";
      weight_view w = m.view();
      w.packed = packed.bytes.get();
      for (int64_t n_tok : {1, 3, 8, 17}) {
        const auto x = activations(n_tok, n_in, 92);
        std::vector<float> y(static_cast<size_t>(n_tok * n_out));
        matmul(w, x.data(), n_tok, y.data(), pool);
        expect_bits_of(fast_order_dot, type, m, x, n_tok, y, "fast");
        if (HasFatalFailure()) return;
        expect_close_to_reference(m, x, n_tok, y, true, std::string("fast ") + type_name(static_cast<uint32_t>(type)));
      }
    }
  }
}

// The fast order's kernels of every ISA this CPU has (AVX2 everywhere, AVX-512 VNNI where
// present) give the same bits over the same packed weights: an AVX2-only CPU decodes the same
// matmul outputs as an AVX-512 one, and an AVX-512 machine's CI covers the AVX2 kernels too.
TEST(Matmul, FastOrderIsTheSameOnEveryIsa) {
  thread_pool pool(2);
  for (auto type : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
    const bool k_type = type == ggml_type::q4_k || type == ggml_type::q6_k;
    const int64_t n_in = k_type ? 512 : 576, n_out = 37;  // a last group of 5 rows: masked halves
    const auto m = make_matrix(type, n_in, n_out, 93);
    const packed_weights packed = pack_weights(m.view());
    if (!packed) GTEST_SKIP() << "no fast kernels on this CPU (" << matmul_isa() << ")";
    weight_view w = m.view();
    w.packed = packed.bytes.get();
    for (int64_t n_tok : {1, 5, 18}) {
      const auto x = activations(n_tok, n_in, 94);
      int isas = 0;
      for (auto isa : supported_isas()) {
        if (isa == d::isa_kind::scalar) continue;  // scalar reads the rows as stored (llama.cpp order)
        ++isas;
        std::vector<float> y(static_cast<size_t>(n_tok * n_out));
        d::matmul_with_isa(isa, w, x.data(), n_tok, y.data(), pool);
        expect_bits_of(fast_order_dot, type, m, x, n_tok, y, std::string("fast, ") + d::isa_name(isa));
        if (HasFatalFailure()) return;
      }
      EXPECT_GE(isas, 1);
    }
  }
}

// Packing several matrices into one allocation (what the CPU backend does, in 2 MiB pages):
// packed_bytes() says each one's room, pack_weights_into() writes the same bytes pack_weights()
// does, and matrices laid end to end at those offsets multiply exactly as separate ones.
TEST(Matmul, PackedEndToEndMatchesSeparatePacking) {
  thread_pool pool(2);
  const auto a = make_matrix(ggml_type::q4_1, 576, 40, 11), b = make_matrix(ggml_type::q8_0, 576, 17, 12);
  const packed_weights pa = pack_weights(a.view()), pb = pack_weights(b.view());
  if (!pa) GTEST_SKIP() << "no fast kernels on this CPU";
  const size_t na = packed_bytes(a.view()), nb = packed_bytes(b.view());
  ASSERT_GT(na, 0u);
  ASSERT_GT(nb, 0u);
  EXPECT_EQ(na % 64, 0u);
  EXPECT_EQ(packed_bytes(make_matrix(ggml_type::f32, 64, 4, 1).view()), 0u);  // no fast kernel: nothing packed
  auto arena = alloc_huge_pages(na + nb);
  ASSERT_NE(arena, nullptr);
  pack_weights_into(a.view(), arena.get());
  pack_weights_into(b.view(), arena.get() + na);
  EXPECT_EQ(std::memcmp(arena.get(), pa.bytes.get(), na), 0);
  EXPECT_EQ(std::memcmp(arena.get() + na, pb.bytes.get(), nb), 0);
  weight_view wa = a.view(), wb = b.view(), sa = a.view(), sb = b.view();
  wa.packed = arena.get();
  wb.packed = arena.get() + na;
  sa.packed = pa.bytes.get();
  sb.packed = pb.bytes.get();
  const auto x = activations(3, 576, 13);
  for (auto [w, s] : {std::pair{wa, sa}, std::pair{wb, sb}}) {
    std::vector<float> y(static_cast<size_t>(3 * w.n_out)), z(y.size());
    matmul(w, x.data(), 3, y.data(), pool);
    matmul(s, x.data(), 3, z.data(), pool);
    EXPECT_EQ(std::memcmp(y.data(), z.data(), y.size() * sizeof(float)), 0);
  }
}

// Q/K/V-style calls through matmul_multi mix packed matrices whose row counts are not multiples
// of 16 (thread chunks then start inside a group): same results as one matmul per matrix.
TEST(Matmul, FastOrderMultiMatchesSingleCalls) {
  thread_pool pool(2);
  const auto a = make_matrix(ggml_type::q4_1, 128, 72, 5), b = make_matrix(ggml_type::q4_1, 128, 24, 6),
             c = make_matrix(ggml_type::q8_0, 128, 50, 7);
  const packed_weights pa = pack_weights(a.view()), pb = pack_weights(b.view()), pc = pack_weights(c.view());
  if (!pa) GTEST_SKIP() << "no fast kernels on this CPU";
  weight_view ws[3] = {a.view(), b.view(), c.view()};
  ws[0].packed = pa.bytes.get();
  ws[1].packed = pb.bytes.get();
  ws[2].packed = pc.bytes.get();
  const int64_t n_tok = 11;
  const auto x = activations(n_tok, 128, 8);
  std::vector<float> y[3], z[3];
  float* ys[3];
  for (int i = 0; i < 3; ++i) {
    y[i].resize(static_cast<size_t>(n_tok * ws[i].n_out));
    z[i].resize(y[i].size());
    ys[i] = y[i].data();
    matmul(ws[i], x.data(), n_tok, z[i].data(), pool);
  }
  matmul_multi(ws, ys, 3, x.data(), n_tok, pool);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y[i], z[i]) << "matrix " << i;
}

TEST(Matmul, OnlyBlockTypesWithFastKernelsArePacked) {
  for (auto type : {ggml_type::f32, ggml_type::f16, ggml_type::bf16}) {
    const auto m = make_matrix(type, 256, 16, 3);
    EXPECT_FALSE(pack_weights(m.view())) << type_name(static_cast<uint32_t>(type));
  }
}

namespace {

// Runs an epilogue on a matmul_multi call with two threads and checks its contract: every row
// visited once, chunks on the asked alignment (or the end), the chunk's outputs final when it
// runs, and the outputs as without it.
void check_epilogue(const weight_view* ws, int n, int64_t n_tok, bool shared, int64_t align) {
  thread_pool pool(2);
  const int64_t n_in = ws[0].n_in;
  const auto x = activations(n_tok, n_in, 31);
  std::vector<std::vector<float>> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  std::vector<float*> ys;
  int64_t rows = 0;
  for (int i = 0; i < n; ++i) {
    want[static_cast<size_t>(i)].resize(static_cast<size_t>(n_tok * ws[i].n_out));
    got[static_cast<size_t>(i)].assign(want[static_cast<size_t>(i)].size(), -1.0f);
    matmul(ws[i], x.data(), n_tok, want[static_cast<size_t>(i)].data(), pool);
    ys.push_back(got[static_cast<size_t>(i)].data());
    rows = shared ? std::max(rows, ws[i].n_out) : rows + ws[i].n_out;
  }
  // Row r of the epilogue's space: (matrix, row in it) for each matrix it names.
  auto targets = [&](int64_t r) {
    std::vector<std::pair<int, int64_t>> out;
    int64_t first = 0;
    for (int i = 0; i < n; ++i) {
      if (shared) out.emplace_back(i, r);
      else if (r >= first && r < first + ws[i].n_out) out.emplace_back(i, r - first);
      first += ws[i].n_out;
    }
    return out;
  };
  std::vector<std::atomic<int>> visits(static_cast<size_t>(rows));
  std::atomic<int> chunks{0}, misaligned{0}, not_final{0};
  const row_epilogue then{[&](int64_t r0, int64_t r1) {
                            ++chunks;
                            // On multiples of the alignment and of 16 rows (a cache line of floats), or the end.
                            if (r0 % std::lcm<int64_t>(align, 16) != 0 || (r1 % std::lcm<int64_t>(align, 16) != 0 && r1 != rows))
                              ++misaligned;
                            for (int64_t r = r0; r < r1; ++r) {
                              ++visits[static_cast<size_t>(r)];
                              for (auto [i, o] : targets(r))
                                for (int64_t t = 0; t < n_tok; ++t) {
                                  const size_t at = static_cast<size_t>(t * ws[i].n_out + o);
                                  if (got[static_cast<size_t>(i)][at] != want[static_cast<size_t>(i)][at]) ++not_final;
                                  got[static_cast<size_t>(i)][at] = 2.0f * got[static_cast<size_t>(i)][at] + 1.0f;
                                }
                            }
                          },
                          align, shared};
  matmul_multi(ws, ys.data(), n, x.data(), n_tok, pool, &then);
  EXPECT_GT(chunks.load(), 1) << "the call should have been split across the pool";
  EXPECT_EQ(misaligned.load(), 0);
  EXPECT_EQ(not_final.load(), 0);
  for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(visits[static_cast<size_t>(r)].load(), 1) << "row " << r;
  for (int i = 0; i < n; ++i)
    for (size_t k = 0; k < got[static_cast<size_t>(i)].size(); ++k)
      ASSERT_EQ(got[static_cast<size_t>(i)][k], 2.0f * want[static_cast<size_t>(i)][k] + 1.0f) << "matrix " << i << " at " << k;
}

// check_epilogue over the matrices as stored (llama.cpp order), then repacked (fast order) where
// this CPU has the fast kernels.
void check_epilogue_both_orders(std::initializer_list<const matrix*> ms, int64_t n_tok, bool shared, int64_t align) {
  std::vector<weight_view> ws;
  for (const matrix* m : ms) ws.push_back(m->view());
  check_epilogue(ws.data(), static_cast<int>(ws.size()), n_tok, shared, align);
  std::vector<packed_weights> packs;
  for (auto& w : ws) {
    packs.push_back(pack_weights(w));
    if (!packs.back()) return;  // no fast kernels on this CPU
    w.packed = packs.back().bytes.get();
  }
  check_epilogue(ws.data(), static_cast<int>(ws.size()), n_tok, shared, align);
}

TEST(Matmul, EpilogueSeesEachChunkOfConcatenatedRowsOnceAligned) {
  // Q/K/V of a model with head size 40 (not a multiple of 16: chunks fall on multiples of 80).
  const auto q = make_matrix(ggml_type::q4_1, 256, 6 * 40, 5), k = make_matrix(ggml_type::q4_1, 256, 2 * 40, 6),
             v = make_matrix(ggml_type::q8_0, 256, 2 * 40, 7);
  check_epilogue_both_orders({&q, &k, &v}, 9, false, 40);
}

TEST(Matmul, EpilogueWithSharedRowsCoversTheSameRowsOfEveryMatrix) {
  // gate and up of 200 rows (not a multiple of 16: the last chunk ends inside a group).
  const auto gate = make_matrix(ggml_type::q4_0, 128, 200, 8), up = make_matrix(ggml_type::q4_1, 128, 200, 9);
  check_epilogue_both_orders({&gate, &up}, 16, true, 16);
}

// A call too small to share out runs on the calling thread: one epilogue call over all rows.
TEST(Matmul, EpilogueOfAnUnsharedCallCoversAllRowsOnce) {
  const auto gate = make_matrix(ggml_type::q8_0, 64, 48, 12), up = make_matrix(ggml_type::q8_0, 64, 48, 13);
  const weight_view ws[2] = {gate.view(), up.view()};
  thread_pool pool(2);
  const auto x = activations(1, 64, 14);
  std::vector<float> y1(48), y2(48);
  float* ys[2] = {y1.data(), y2.data()};
  std::vector<std::pair<int64_t, int64_t>> seen;
  const row_epilogue then{[&](int64_t r0, int64_t r1) { seen.emplace_back(r0, r1); }, 16, true};
  matmul_multi(ws, ys, 2, x.data(), 1, pool, &then);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_pair(int64_t{0}, int64_t{48}));
}

// Past the largest group of matrices one dispatch takes, the call splits; the epilogue then runs
// once over all rows.
TEST(Matmul, EpilogueOfASplitCallRunsOverAllRows) {
  std::vector<matrix> ms;
  for (int i = 0; i < 9; ++i) ms.push_back(make_matrix(ggml_type::q8_0, 64, 16 + 16 * (i % 3), 40 + static_cast<uint32_t>(i)));
  std::vector<weight_view> ws;
  for (const auto& m : ms) ws.push_back(m.view());
  thread_pool pool(2);
  const auto x = activations(3, 64, 11);
  std::vector<std::vector<float>> y(ws.size());
  std::vector<float*> ys;
  int64_t rows = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    y[i].resize(static_cast<size_t>(3 * ws[i].n_out));
    ys.push_back(y[i].data());
    rows += ws[i].n_out;
  }
  std::vector<std::pair<int64_t, int64_t>> seen;
  const row_epilogue then{[&](int64_t r0, int64_t r1) { seen.emplace_back(r0, r1); }};
  matmul_multi(ws.data(), ys.data(), static_cast<int>(ws.size()), x.data(), 3, pool, &then);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_pair(int64_t{0}, rows));
}

// A prologue writes each token's input row once, before anything reads it: the outputs equal a
// plain matmul of the rows it writes, on every path (quantized and float kernels, weights as
// stored and repacked where this CPU has the fast kernels, one thread or shared out, a call split
// past 8 matrices).
void check_prologue(const weight_view* ws, int n, int64_t n_tok, d::isa_kind isa = d::best_isa()) {
  thread_pool pool(2);
  const int64_t n_in = ws[0].n_in;
  const auto src = activations(n_tok, n_in, 57);
  std::vector<float> ready(src.size());
  for (size_t i = 0; i < src.size(); ++i) ready[i] = 0.5f * src[i] + 0.25f;
  std::vector<float> x(src.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n_tok));
  const row_prologue first{[&](int64_t t) {
    ++visits[static_cast<size_t>(t)];
    for (int64_t i = 0; i < n_in; ++i) x[static_cast<size_t>(t * n_in + i)] = 0.5f * src[static_cast<size_t>(t * n_in + i)] + 0.25f;
  }};
  std::vector<std::vector<float>> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  std::vector<float*> ys;
  for (int i = 0; i < n; ++i) {
    want[static_cast<size_t>(i)].resize(static_cast<size_t>(n_tok * ws[i].n_out));
    got[static_cast<size_t>(i)].assign(want[static_cast<size_t>(i)].size(), -1.0f);
    d::matmul_with_isa(isa, ws[i], ready.data(), n_tok, want[static_cast<size_t>(i)].data(), pool);
    ys.push_back(got[static_cast<size_t>(i)].data());
  }
  d::matmul_multi_with_isa(isa, ws, ys.data(), n, x.data(), n_tok, pool, nullptr, &first);
  for (int64_t t = 0; t < n_tok; ++t) ASSERT_EQ(visits[static_cast<size_t>(t)].load(), 1) << "token " << t;
  EXPECT_EQ(x, ready);
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << "matrix " << i;
}

TEST(Matmul, PrologueWritesEachInputRowOnceBeforeItIsRead) {
  const auto q = make_matrix(ggml_type::q4_1, 256, 96, 60), k = make_matrix(ggml_type::q8_0, 256, 32, 61),
             f = make_matrix(ggml_type::f16, 256, 48, 62);
  for (int64_t n_tok : {1, 3, 4, 9, 16}) {
    SCOPED_TRACE("n_tok " + std::to_string(n_tok));
    const weight_view quantized[2] = {q.view(), k.view()};
    check_prologue(quantized, 2, n_tok);
    const weight_view mixed[2] = {q.view(), f.view()};
    check_prologue(mixed, 2, n_tok);
    const weight_view floats[1] = {f.view()};  // no activation quantization at all
    check_prologue(floats, 1, n_tok);
    const auto pq = pack_weights(q.view()), pk = pack_weights(k.view());
    if (!pq || !pk) continue;  // no fast kernels on this CPU
    weight_view packed[2] = {q.view(), k.view()};
    packed[0].packed = pq.bytes.get();
    packed[1].packed = pk.bytes.get();
    check_prologue(packed, 2, n_tok);
  }
}

TEST(Matmul, PrologueOnEveryIsaThisCpuHas) {
  const auto q = make_matrix(ggml_type::q4_0, 128, 64, 63), f = make_matrix(ggml_type::f32, 128, 32, 64);
  const weight_view mixed[2] = {q.view(), f.view()};
  for (auto isa : {d::isa_kind::scalar, d::isa_kind::avx2, d::isa_kind::avx512vnni}) {
    if (!d::isa_supported(isa)) continue;
    SCOPED_TRACE(d::isa_name(isa));
    check_prologue(mixed, 2, 1, isa);
    check_prologue(mixed, 2, 9, isa);
  }
}

TEST(Matmul, PrologueOfASplitCallRunsOncePerToken) {
  std::vector<matrix> ms;
  for (int i = 0; i < 9; ++i) ms.push_back(make_matrix(ggml_type::q8_0, 64, 16 + 16 * (i % 3), 70 + static_cast<uint32_t>(i)));
  std::vector<weight_view> ws;
  for (const auto& m : ms) ws.push_back(m.view());
  check_prologue(ws.data(), static_cast<int>(ws.size()), 5);
}

TEST(Matmul, PrologueRunsWhenNoRowIsComputed) {
  thread_pool pool(2);
  std::vector<float> x(4 * 32, 0.0f);
  int calls = 0;
  const row_prologue first{[&](int64_t t) {
    ++calls;
    x[static_cast<size_t>(t * 32)] = 1.0f;
  }};
  matmul_multi(nullptr, nullptr, 0, x.data(), 4, pool, nullptr, &first);
  EXPECT_EQ(calls, 4);
  const auto empty = make_matrix(ggml_type::q8_0, 32, 0, 80);
  const weight_view w = empty.view();
  float* y = nullptr;
  matmul_multi(&w, &y, 1, x.data(), 4, pool, nullptr, &first);
  EXPECT_EQ(calls, 8);
}

}  // namespace
