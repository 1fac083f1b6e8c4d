// model/matmul_amx.cpp on any CPU: the tile layout's repacking against the weights' own values,
// and the tile kernels' arithmetic — a plain C++ statement of TDPBSUD over the repacked layout,
// then the scales — against the fast order (the x16 kernels matmul() runs), bit for bit. The AMX
// kernels themselves (matmul_amx_tiles.cpp) run only where amx_support() says so.
#include "model/matmul_amx.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "model/matmul.hpp"
#include "model/quant.hpp"
#include "model/thread_pool.hpp"

using namespace troupe::model;
namespace d = troupe::model::detail;

namespace {

struct matrix {
  ggml_type type;
  int64_t n_in, n_out;
  size_t stride;
  std::vector<uint8_t> bytes;
  weight_view view() const { return weight_view{type, bytes.data(), n_in, n_out, stride}; }
};

matrix make_matrix(ggml_type type, int64_t n_in, int64_t n_out, uint32_t seed) {
  matrix m{type, n_in, n_out, row_bytes(type, n_in), {}};
  m.bytes.resize(m.stride * static_cast<size_t>(n_out));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    for (auto& v : w) v = dist(rng);
    quantize_row(type, w.data(), m.bytes.data() + static_cast<size_t>(o) * m.stride, n_in);
  }
  return m;
}

// Activations quantized as matmul() does (quantize_acts_scalar: the same bits as the SIMD ones),
// with a few large channels like real hidden states.
struct acts {
  std::vector<int8_t> qs;
  std::vector<float> dx, sx;
  std::vector<int32_t> sums;
  d::q8_acts view{};
  std::vector<float> x;
};

acts make_acts(int64_t n_tok, int64_t n_in, uint32_t seed) {
  acts a;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  a.x.resize(static_cast<size_t>(n_tok * n_in));
  for (size_t i = 0; i < a.x.size(); ++i) a.x[i] = dist(rng) * (i % 97 == 7 ? 12.0f : 1.0f);
  const int64_t nb = n_in / 32, nb_pad = (nb + 1) / 2 * 2;
  a.qs.assign(static_cast<size_t>(n_tok * nb_pad * 32), 0);
  a.dx.assign(static_cast<size_t>(n_tok * nb_pad), 0.0f);
  a.sx.assign(a.dx.size(), 0.0f);
  a.sums.assign(2 * a.dx.size(), 0);
  for (int64_t t = 0; t < n_tok; ++t)
    d::quantize_acts_scalar(a.x.data() + t * n_in, n_in, a.qs.data() + t * nb_pad * 32, a.dx.data() + t * nb_pad,
                            a.sx.data() + t * nb_pad, a.sums.data() + 2 * t * nb_pad);
  a.view = d::q8_acts{a.qs.data(), a.dx.data(), a.sx.data(), a.sums.data(), nb, nb_pad, nb_pad * 32};
  return a;
}

// Bytes of one group of 16 rows in pack_weights' x16 layout.
size_t x16_group_bytes(ggml_type type, int64_t n_in) {
  const int block = [&] {
    switch (type) {
      case ggml_type::q4_0: return d::x16_layout::q4_0_block;
      case ggml_type::q4_1: return d::x16_layout::q4_1_block;
      case ggml_type::q8_0: return d::x16_layout::q8_0_block;
      case ggml_type::q4_k: return d::x16_layout::q4_k_block;
      default: return d::x16_layout::q6_k_block;
    }
  }();
  return static_cast<size_t>(block) * static_cast<size_t>(n_in / 32);
}

// The whole matrix in the tile layout, from pack_weights' x16 layout (its first bytes).
std::vector<uint8_t> amx_pack(const matrix& m, const uint8_t* x16) {
  const int64_t groups = (m.n_out + 15) / 16;
  const size_t x16_group = x16_group_bytes(m.type, m.n_in);
  std::vector<uint8_t> out(d::amx_group_bytes(m.n_in) * static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g)
    d::amx_pack_group(m.type, x16 + g * x16_group, m.n_in, out.data() + g * d::amx_group_bytes(m.n_in));
  return out;
}

d::q8_kernel_fn kernel_of(const d::x16_kernels& k, ggml_type t) {
  switch (t) {
    case ggml_type::q4_0: return k.q4_0;
    case ggml_type::q4_1: return k.q4_1;
    case ggml_type::q8_0: return k.q8_0;
    case ggml_type::q4_k: return k.q4_k;
    default: return k.q6_k;
  }
}

const ggml_type types[] = {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k};

}  // namespace

TEST(MatmulAmx, DetectionSaysWhyAndAgreesWithCpuid) {
  const auto& s = amx_support();
  const std::string line = amx_path_line();
  if (s.available) {
    EXPECT_TRUE(s.why.empty());
    EXPECT_NE(line.find("amx-int8 tiles"), std::string::npos) << line;
  } else {
    EXPECT_FALSE(s.why.empty());
    EXPECT_EQ(line, "AMX: not available (" + s.why + ")");
  }
  __builtin_cpu_init();
  // A CPU without AVX-512 has no AMX either (every AMX part has AVX-512).
  if (!__builtin_cpu_supports("avx512f")) {
    EXPECT_FALSE(s.available);
  }
}

// TDPBSUD's statement on a hand-made case: signed A bytes, unsigned B bytes (200 stays 200, not -56).
TEST(MatmulAmx, EmulatedTileMultiplyIsSignedTimesUnsigned) {
  int8_t a[2][8] = {{1, -2, 3, -4, 5, 6, 7, 8}, {-128, 0, 0, 0, 0, 0, 0, 127}};
  uint8_t b[2][64] = {};
  for (int n = 0; n < 16; ++n)
    for (int i = 0; i < 4; ++i) {
      b[0][4 * n + i] = static_cast<uint8_t>(n + i);
      b[1][4 * n + i] = static_cast<uint8_t>(200 + i);
    }
  int32_t c[16][16] = {};
  c[1][3] = 1000;  // accumulates into C
  d::tdpbsud_emulated(c, &a[0][0], 8, &b[0][0], 2, 8);
  for (int n = 0; n < 16; ++n) {
    const int32_t row0 = 1 * n - 2 * (n + 1) + 3 * (n + 2) - 4 * (n + 3) + 5 * 200 + 6 * 201 + 7 * 202 + 8 * 203;
    EXPECT_EQ(c[0][n], row0) << n;
    EXPECT_EQ(c[1][n], -128 * n + 127 * 203 + (n == 3 ? 1000 : 0)) << n;
  }
  for (int n = 0; n < 16; ++n) EXPECT_EQ(c[2][n], 0);  // rows past `rows` untouched
}

// Every element of the tile layout, read back as the weight it stands for, equals the GGUF
// row's own dequantization: no nibble, row or scale misplaced.
TEST(MatmulAmx, RepackedTilesHoldTheWeights) {
  for (auto type : types) {
    const int64_t n_in = 512, n_out = 21;  // a last group of 5 rows
    const auto m = make_matrix(type, n_in, n_out, 7);
    const packed_weights packed = pack_weights(m.view());
    if (!packed) GTEST_SKIP() << "no fast-order layout on this CPU (" << matmul_isa() << ")";
    const auto tiles = amx_pack(m, packed.bytes.get());
    const auto traits = d::amx_traits(type);
    ASSERT_TRUE(traits);
    const d::amx_type_traits tr = *traits;
    std::vector<float> want(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < n_out; ++o) {
      dequantize_row(type, m.bytes.data() + o * m.stride, want.data(), n_in);
      const uint8_t* group = tiles.data() + (o / 16) * d::amx_group_bytes(n_in);
      const int r = static_cast<int>(o % 16);
      for (int64_t e = 0; e < n_in; ++e) {
        const uint8_t* blk = group + (e / 32) * d::amx_layout::block;
        const int k = static_cast<int>(e % 32) / 4, i = static_cast<int>(e % 4);
        const int q = blk[64 * k + 4 * r + i] - tr.offset;
        float dw, mw;
        std::memcpy(&dw, blk + 512 + 4 * r, 4);
        std::memcpy(&mw, blk + 576 + 4 * r, 4);
        float got = static_cast<float>(q) * dw;
        if (tr.halves && e % 32 >= 16) got = static_cast<float>(q) * mw;
        if (tr.has_min) got += mw;
        ASSERT_NEAR(got, want[static_cast<size_t>(e)], 1e-6f * (1.0f + std::fabs(want[static_cast<size_t>(e)])))
            << type_name(static_cast<uint32_t>(type)) << " row " << o << " element " << e;
      }
    }
  }
}

// The tile kernels' arithmetic (TDPBSUD per block, then the scales) over the tile layout equals
// the fast order's result bit for bit: token counts below, at and above a tile's 16 rows, rows
// not multiples of 16, a row range starting inside a group, Q6_K's two half-block tiles.
TEST(MatmulAmx, EmulatedTileKernelEqualsTheFastOrderBitForBit) {
  thread_pool pool(1);
  for (auto type : types) {
    const bool k_quant = type == ggml_type::q4_k || type == ggml_type::q6_k;
    for (auto [n_in, n_out] : std::vector<std::pair<int64_t, int64_t>>{{k_quant ? 256 : 96, 40}, {k_quant ? 768 : 576, 16}, {256, 3}}) {
      const auto m = make_matrix(type, n_in, n_out, 11);
      const packed_weights packed = pack_weights(m.view());
      if (!packed) GTEST_SKIP() << "no fast-order layout on this CPU (" << matmul_isa() << ")";
      const auto tiles = amx_pack(m, packed.bytes.get());
      const d::kernel_weights kw{tiles.data(), d::amx_group_bytes(n_in), n_in};
      weight_view w = m.view();
      w.packed = packed.bytes.get();
      for (int64_t n_tok : {1, 2, 5, 16, 33}) {
        const auto a = make_acts(n_tok, n_in, 12 + static_cast<uint32_t>(n_tok));
        std::vector<float> fast(static_cast<size_t>(n_tok * n_out)), tile(fast.size(), -1.0f);
        // On this CPU matmul() runs the x16 VNNI kernels (or, with AMX, the tile kernels: the same bits).
        matmul(w, a.x.data(), n_tok, fast.data(), pool);
        const int64_t r0 = n_out > 16 ? 5 : 0;  // rows [0, 5) computed apart: a range starting mid-group
        kernel_of(d::amx_emulated_kernels(), type)(kw, a.view, r0, n_out, 0, n_tok, tile.data(), n_out);
        if (r0) kernel_of(d::amx_emulated_kernels(), type)(kw, a.view, 0, r0, 0, n_tok, tile.data(), n_out);
        for (size_t i = 0; i < fast.size(); ++i)
          ASSERT_EQ(std::memcmp(&fast[i], &tile[i], sizeof(float)), 0)
              << type_name(static_cast<uint32_t>(type)) << " n_in=" << n_in << " n_out=" << n_out << " n_tok=" << n_tok
              << " token " << i / n_out << " row " << i % n_out << ": " << tile[i] << " vs fast " << fast[i];
      }
    }
  }
}

// On a CPU with AMX: the tile kernels themselves (TDPBSUD, then the scales with AVX-512) against
// the AVX-512 VNNI x16 kernels over the same weights, bit for bit, for every type, 1 to 24 blocks
// per row (the rotation of C tiles shorter than, equal to and longer than its depth), token counts
// below, at and above a tile's 16 rows, and row ranges that start and end inside a group. Skipped
// (saying why) where amx_support() is false.
TEST(MatmulAmx, TileKernelEqualsTheVnniKernelBitForBit) {
  if (!amx_support().available) GTEST_SKIP() << amx_path_line();
  if (!__builtin_cpu_supports("avx512vnni")) GTEST_SKIP() << "no AVX-512 VNNI to compare with";
  for (auto type : types) {
    const bool k_quant = type == ggml_type::q4_k || type == ggml_type::q6_k;
    for (auto [n_in, n_out] : std::vector<std::pair<int64_t, int64_t>>{{k_quant ? 256 : 32, 20}, {k_quant ? 256 : 96, 40}, {k_quant ? 768 : 576, 48}, {256, 3}}) {
      const auto m = make_matrix(type, n_in, n_out, 21);
      const packed_weights packed = pack_weights(m.view());
      ASSERT_TRUE(packed);
      const auto tiles = amx_pack(m, packed.bytes.get());
      const d::kernel_weights tw{tiles.data(), d::amx_group_bytes(n_in), n_in};
      const d::kernel_weights xw{packed.bytes.get(), x16_group_bytes(type, n_in), n_in};
      for (int64_t n_tok : {1, 2, 7, 16, 17, 40}) {
        const auto a = make_acts(n_tok, n_in, 31 + static_cast<uint32_t>(n_tok));
        std::vector<float> vnni(static_cast<size_t>(n_tok * n_out), -2.0f), tile(vnni.size(), -1.0f);
        const int64_t r0 = n_out > 16 ? 5 : 0, r1 = n_out > 16 ? n_out - 3 : n_out;
        for (auto [lo, hi] : {std::pair{int64_t{0}, r0}, std::pair{r0, r1}, std::pair{r1, n_out}}) {
          if (lo == hi) continue;
          kernel_of(d::avx512vnni_x16_kernels(), type)(xw, a.view, lo, hi, 0, n_tok, vnni.data(), n_out);
          kernel_of(d::amx_kernels(), type)(tw, a.view, lo, hi, 0, n_tok, tile.data(), n_out);
        }
        for (size_t i = 0; i < vnni.size(); ++i)
          ASSERT_EQ(std::memcmp(&vnni[i], &tile[i], sizeof(float)), 0)
              << type_name(static_cast<uint32_t>(type)) << " n_in=" << n_in << " n_out=" << n_out << " n_tok=" << n_tok
              << " token " << i / n_out << " row " << i % n_out << ": " << tile[i] << " vs vnni " << vnni[i];
      }
    }
  }
}
