// Paged attention against a plain double-precision softmax attention over the same K/V, for both
// storage types, both summation orders (llama.cpp's decode and prompt kernels) and the head
// shapes that take the different code paths (head_dim a multiple of 64, of 8 only, odd groups).
#include "model/paged_attention.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/detail/attention_avx2.hpp"
#include "model/detail/attention_avx512.hpp"
#include "model/quant.hpp"

using namespace troupe::model;

namespace {

struct attention_case {
  int n_kv_heads, head_dim, group, block_size, n_ctx;
};

// Runs paged_attention_group for every KV head and returns the outputs; want gets the reference
// computed from the values as stored (fp16-rounded for f16).
// With `split`, each query goes in the parts split_attention() gives it (merged after), as the
// backend runs it.
std::vector<float> run(const attention_case& c, kv_dtype dt, attention_order order, bool by_column,
                       std::vector<double>& want, bool split = false) {
  std::mt19937 rng(static_cast<unsigned>(c.head_dim * 131 + c.group * 7 + c.n_ctx));
  std::normal_distribution<float> d(0.0f, 1.0f);
  const int n_q = c.n_kv_heads * c.group, kvd = c.n_kv_heads * c.head_dim;
  const int n_blocks = (c.n_ctx + c.block_size - 1) / c.block_size;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int b = 0; b < n_blocks; ++b) table[static_cast<size_t>(b)] = n_blocks - 1 - b;  // scattered blocks
  const size_t elem = dt == kv_dtype::f16 ? 2 : dt == kv_dtype::q8 ? 1 : 4;
  const size_t n_rows = static_cast<size_t>(n_blocks) * c.block_size * c.n_kv_heads;
  std::vector<uint8_t> kmem(n_rows * c.head_dim * elem);
  std::vector<uint8_t> vmem(kmem.size());
  std::vector<float> kscale(n_rows), vscale(n_rows);
  kv_layer_view kv;
  kv.k = kmem.data();
  kv.v = vmem.data();
  kv.k_scale = kscale.data();
  kv.v_scale = vscale.data();
  kv.dtype = dt;
  kv.n_kv_heads = c.n_kv_heads;
  kv.head_dim = c.head_dim;
  kv.block_size = c.block_size;
  kv.k_by_column = by_column;

  std::vector<float> K(static_cast<size_t>(c.n_ctx) * kvd), V(K.size());
  for (auto& x : K) x = d(rng);
  for (auto& x : V) x = d(rng);
  // Stored out of order, so that a store spilling into a neighbouring slot would not be repaired by
  // the neighbour's own store coming after it.
  std::vector<int> order_of_stores(static_cast<size_t>(c.n_ctx));
  for (int p = 0; p < c.n_ctx; ++p) order_of_stores[static_cast<size_t>(p)] = p;
  std::shuffle(order_of_stores.begin(), order_of_stores.end(), rng);
  for (int p : order_of_stores) kv_store(kv, table.data(), p, K.data() + p * kvd, V.data() + p * kvd);
  if (dt == kv_dtype::f16) {
    for (auto& x : K) x = round_fp16(x);
    for (auto& x : V) x = round_fp16(x);
  }
  std::vector<double> Kd(K.begin(), K.end()), Vd(V.begin(), V.end());
  if (dt == kv_dtype::q8) {  // the reference sees code x scale, read back from the memory itself
    for (int p = 0; p < c.n_ctx; ++p)
      for (int g = 0; g < c.n_kv_heads; ++g) {
        const int64_t off = kv.offset(table[static_cast<size_t>(p / c.block_size)], g, p % c.block_size);
        const float ks = kscale[static_cast<size_t>(off / c.head_dim)], vs = vscale[static_cast<size_t>(off / c.head_dim)];
        float amax = 0.0f;
        for (int i = 0; i < c.head_dim; ++i) {
          const size_t at = static_cast<size_t>(p * kvd + g * c.head_dim + i);
          amax = std::max(amax, std::fabs(K[at]));
          const int64_t k_at = kv.k_index(table[static_cast<size_t>(p / c.block_size)], g, p % c.block_size, i);
          const int code = by_column ? static_cast<int>(kmem[static_cast<size_t>(k_at)]) - 128
                                     : static_cast<int>(reinterpret_cast<const int8_t*>(kmem.data())[k_at]);
          Kd[at] = static_cast<double>(code) * ks;
          Vd[at] = static_cast<double>(reinterpret_cast<const int8_t*>(vmem.data())[off + i]) * vs;
          // each code is the value rounded to the nearest step of the row's scale
          EXPECT_LE(std::fabs(Kd[at] - K[at]), 0.5 * ks * (1 + 1e-5));
        }
        EXPECT_FLOAT_EQ(ks, amax / 127.0f);
      }
  }
  std::vector<float> q(static_cast<size_t>(n_q) * c.head_dim);
  for (auto& x : q) x = d(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  std::vector<float> out(q.size()), scratch(static_cast<size_t>(c.n_ctx) * c.group);
  const attention_split sp = split_attention(kv, order, c.n_ctx);
  for (int g = 0; g < c.n_kv_heads; ++g) {
    if (!split || sp.n_parts == 1) {
      paged_attention_group(q.data(), kv, table.data(), c.n_ctx, g, c.group, scale, out.data(), scratch.data(), order);
      continue;
    }
    std::vector<float> parts(static_cast<size_t>(sp.n_parts * c.group * c.head_dim)), stats(2 * sp.n_parts * c.group);
    for (int p = 0; p < sp.n_parts; ++p)
      paged_attention_part(q.data(), kv, table.data(), c.n_ctx, g, c.group, scale, sp, p,
                           parts.data() + p * c.group * c.head_dim, stats.data() + 2 * p * c.group, scratch.data());
    merge_attention_parts(parts.data(), stats.data(), sp.n_parts, c.group, c.head_dim,
                          out.data() + g * c.group * c.head_dim);
  }

  // q8 K by column is scored against the query quantized as llama.cpp quantizes activations for
  // q8_0 K (int8 per 32 values, scale max |x| / 127): the reference sees that query.
  std::vector<double> qd(q.begin(), q.end());
  if (dt == kv_dtype::q8 && by_column && kv_q8_supported(c.head_dim))
    for (size_t b = 0; b < q.size(); b += 32) {
      float amax = 0.0f;
      for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(q[i]));
      const float d = amax / 127.0f;
      for (size_t i = b; i < b + 32; ++i) qd[i] = static_cast<double>(std::nearbyint(q[i] * (1.0f / d))) * d;
    }
  want.assign(out.size(), 0.0);
  for (int h = 0; h < n_q; ++h) {
    const int g = h / c.group;
    std::vector<double> s(static_cast<size_t>(c.n_ctx));
    for (int p = 0; p < c.n_ctx; ++p) {
      double dot = 0;
      for (int i = 0; i < c.head_dim; ++i)
        dot += qd[static_cast<size_t>(h * c.head_dim + i)] * Kd[static_cast<size_t>(p * kvd + g * c.head_dim + i)];
      s[static_cast<size_t>(p)] = dot * scale;
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (int p = 0; p < c.n_ctx; ++p)
      for (int i = 0; i < c.head_dim; ++i)
        want[static_cast<size_t>(h * c.head_dim + i)] +=
            s[static_cast<size_t>(p)] / sum * Vd[static_cast<size_t>(p * kvd + g * c.head_dim + i)];
  }
  return out;
}

}  // namespace

TEST(PagedAttention, MatchesDoublePrecisionReference) {
  const attention_case cases[] = {
      {3, 64, 3, 16, 1},    // SmolLM2's shape, first token
      {3, 64, 3, 16, 45},   // positions not a multiple of 16 or 64
      {2, 128, 4, 32, 200},
      {2, 32, 2, 8, 70},    // head_dim not a multiple of 64: the 8-wide score path
      {1, 12, 20, 4, 33},   // group > 16 and head_dim % 8 != 0: the scalar path
      {2, 64, 5, 16, 77},   // fast order: heads weighed 4 + 1 at a time, a last chunk of 13 positions
      {4, 64, 1, 8, 9},     // fast order: one head per KV head, blocks shorter than a 16-position chunk
      {2, 64, 7, 32, 150},  // fast order: two chunks per block, heads weighed 4 + 3 (Qwen2's group)
      {1, 128, 3, 16, 33},  // fast order at head size 128: heads weighed 2 + 1
      {2, 96, 2, 16, 40},   // head size 96: the fast order falls back to llama.cpp's decode order
      {2, 64, 3, 20, 61},   // blocks of 20: a 16-position chunk and one of 4 per block
  };
  for (const auto& c : cases)
    for (kv_dtype dt : {kv_dtype::f32, kv_dtype::f16, kv_dtype::q8})
      for (attention_order order : {attention_order::single, attention_order::batch, attention_order::fast})
        for (bool by_column : {false, true}) {
          // K by column: fp16 and q8 (head sizes a multiple of 4), through the fast kernel where it
          // fits and plain loops elsewhere
          if (by_column && (dt == kv_dtype::f32 || c.head_dim % 4 != 0)) continue;
          std::vector<double> want;
          const auto got = run(c, dt, order, by_column, want);
          double worst = 0;
          for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
          EXPECT_LT(worst, 2e-6) << "head_dim " << c.head_dim << " group " << c.group << " n_ctx " << c.n_ctx
                                 << (dt == kv_dtype::f16 ? " f16" : dt == kv_dtype::q8 ? " q8" : " f32")
                                 << (order == attention_order::batch ? " batch" : order == attention_order::fast ? " fast" : " single")
                                 << (by_column ? " K by column" : " K by row");
        }
}

// A long query in parts (split_attention, as the backend runs the fast kernel so that 3 KV heads
// spread over 2 threads): whole blocks per part, at most 8, never a split at 64 positions or less
// or where the fast kernel does not run, and the merged parts as close to the exact attention as
// the whole query is.
TEST(PagedAttention, SplitQueriesMatchTheReference) {
  const attention_case cases[] = {
      {3, 64, 3, 16, 65},    // two parts, the last of one position
      {3, 64, 3, 16, 300},   // five parts of 64
      {2, 128, 4, 32, 1000}, // eight parts of whole 32-position blocks
      {3, 64, 3, 16, 4096},  // SmolLM2 at 4096 tokens of context
      {2, 64, 3, 20, 161},   // blocks of 20
  };
  for (const auto& c : cases)
    for (kv_dtype dt : {kv_dtype::f16, kv_dtype::q8}) {
      kv_layer_view kv;
      kv.dtype = dt;
      kv.head_dim = c.head_dim;
      kv.n_kv_heads = c.n_kv_heads;
      kv.block_size = c.block_size;
      kv.k_by_column = kv_k_by_column(dt, c.head_dim, true);
      const attention_split sp = split_attention(kv, attention_order::fast, c.n_ctx);
      if (sp.n_parts == 1) GTEST_SKIP() << "no fast attention kernel on this CPU";
      EXPECT_LE(sp.n_parts, 8);
      EXPECT_EQ(sp.part_len % c.block_size, 0);
      EXPECT_LT((sp.n_parts - 1) * sp.part_len, c.n_ctx);  // the last part holds a position
      EXPECT_GE(sp.n_parts * sp.part_len, c.n_ctx);
      EXPECT_EQ(split_attention(kv, attention_order::fast, 64).n_parts, 1);
      std::vector<double> want, want_whole;
      const auto got = run(c, dt, attention_order::fast, kv.k_by_column, want, true);
      const auto whole = run(c, dt, attention_order::fast, kv.k_by_column, want_whole, false);
      double worst = 0, worst_whole = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::fabs(got[i] - want[i]));
        worst_whole = std::max(worst_whole, std::fabs(whole[i] - want[i]));
      }
      EXPECT_LT(worst, 2e-6) << "n_ctx " << c.n_ctx << " in " << sp.n_parts << " parts"
                             << (dt == kv_dtype::q8 ? " q8" : " f16");
      EXPECT_LT(worst, 2 * worst_whole + 1e-7) << "merging parts must not lose accuracy";
    }
  // llama.cpp's orders, and head sizes without the fast kernel, are never split.
  kv_layer_view kv;
  kv.dtype = kv_dtype::f16;
  kv.head_dim = 96;
  kv.block_size = 16;
  EXPECT_EQ(split_attention(kv, attention_order::fast, 4096).n_parts, 1);
  kv.head_dim = 64;
  EXPECT_EQ(split_attention(kv, attention_order::single, 4096).n_parts, 1);
}

// q8 rows at the edges of float: an all-zero row, one too small for 1 / scale to be finite
// (stored as zeros), and one holding a NaN (its scale is NaN, so it reads back as NaN, as fp16
// memory would keep it). No code is ever outside [-127, 127]; K by column holds the same codes
// + 128 at k_index. A NaN row's K turns every score NaN, and attention's output with it.
TEST(PagedAttention, Q8RowsAtTheEdgesOfFloat) {
  const int hd = 64;
  for (bool by_column : {false, true}) {
    std::vector<int8_t> k(4 * hd), v(4 * hd);
    std::vector<float> ks(4, -1.0f), vs(4, -1.0f);
    kv_layer_view kv;
    kv.k = k.data();
    kv.v = v.data();
    kv.k_scale = ks.data();
    kv.v_scale = vs.data();
    kv.dtype = kv_dtype::q8;
    kv.n_kv_heads = 1;
    kv.head_dim = hd;
    kv.block_size = 4;
    kv.k_by_column = by_column;
    const int32_t table[1] = {0};
    std::vector<float> zeros(hd, 0.0f), tiny(hd, 1e-38f), with_nan(hd, 1.0f), big(hd, -3e38f);
    with_nan[5] = NAN;
    big[0] = 3e38f;
    kv_store(kv, table, 0, zeros.data(), zeros.data());
    kv_store(kv, table, 1, tiny.data(), tiny.data());
    kv_store(kv, table, 2, with_nan.data(), with_nan.data());
    kv_store(kv, table, 3, big.data(), big.data());
    EXPECT_EQ(ks[0], 0.0f);
    EXPECT_TRUE(std::isnan(ks[2]));
    EXPECT_FLOAT_EQ(ks[3], 3e38f / 127.0f);
    auto k_code = [&](int slot, int i) {
      const int64_t at = kv.k_index(0, 0, slot, i);
      return by_column ? static_cast<int>(static_cast<uint8_t>(k[static_cast<size_t>(at)])) - 128
                       : static_cast<int>(k[static_cast<size_t>(at)]);
    };
    for (int i = 0; i < hd; ++i) {
      EXPECT_EQ(k_code(0, i), 0);
      EXPECT_EQ(k_code(1, i), 0);
      EXPECT_EQ(k_code(2, i), 0);
      EXPECT_EQ(k_code(3, i), i == 0 ? 127 : -127);
      EXPECT_EQ(v[static_cast<size_t>(3 * hd + i)], i == 0 ? 127 : -127);  // V stays by row
    }
    std::vector<float> q(hd, 0.5f), out(hd), scratch(4);
    paged_attention_group(q.data(), kv, table, 2, 0, 1, 0.125f, out.data(), scratch.data(), attention_order::fast);
    for (float x : out) EXPECT_EQ(x, 0.0f) << "zero and tiny rows weigh zero values";
    paged_attention_group(q.data(), kv, table, 3, 0, 1, 0.125f, out.data(), scratch.data(), attention_order::fast);
    for (float x : out) EXPECT_TRUE(std::isnan(x)) << (by_column ? "K by column" : "K by row");
  }
}

namespace {

// The backend stores each head's K and V rows as its Q/K/V matmul finishes them (kv_store_head,
// K and V at different times): the same bytes as kv_store's whole-token stores.
TEST(PagedAttention, StoringHeadByHeadWritesWhatKvStoreWrites) {
  for (auto dt : {kv_dtype::f16, kv_dtype::q8, kv_dtype::f32})
    for (bool by_column : {false, true}) {
      if (dt == kv_dtype::f32 && by_column) continue;
      const int heads = 3, hd = 64, bs = 16, n_ctx = 40, kvd = heads * hd;
      const int n_blocks = (n_ctx + bs - 1) / bs;
      const std::vector<int32_t> table = {2, 0, 1};
      const size_t elem = dt == kv_dtype::f16 ? 2 : dt == kv_dtype::q8 ? 1 : 4;
      const size_t rows = static_cast<size_t>(n_blocks) * bs * heads;
      struct memory {
        std::vector<uint8_t> k, v;
        std::vector<float> ks, vs;
      } whole{std::vector<uint8_t>(rows * hd * elem), std::vector<uint8_t>(rows * hd * elem),
              std::vector<float>(rows), std::vector<float>(rows)},
          by_head = whole;
      auto view = [&](memory& m) {
        kv_layer_view kv;
        kv.k = m.k.data();
        kv.v = m.v.data();
        if (dt == kv_dtype::q8) {
          kv.k_scale = m.ks.data();
          kv.v_scale = m.vs.data();
        }
        kv.dtype = dt;
        kv.n_kv_heads = heads;
        kv.head_dim = hd;
        kv.block_size = bs;
        kv.k_by_column = by_column;
        return kv;
      };
      std::mt19937 rng(5);
      std::normal_distribution<float> d(0.0f, 2.0f);
      std::vector<float> K(static_cast<size_t>(n_ctx) * kvd), V(K.size());
      for (auto& x : K) x = d(rng);
      for (auto& x : V) x = d(rng);
      const kv_layer_view a = view(whole), b = view(by_head);
      for (int p = 0; p < n_ctx; ++p) kv_store(a, table.data(), p, K.data() + p * kvd, V.data() + p * kvd);
      for (int p = n_ctx - 1; p >= 0; --p)  // V first, heads backwards: order must not matter
        for (int h = heads - 1; h >= 0; --h) {
          kv_store_head(b, table.data(), p, h, nullptr, V.data() + p * kvd + h * hd);
          kv_store_head(b, table.data(), p, h, K.data() + p * kvd + h * hd, nullptr);
        }
      const std::string what = std::string(dt == kv_dtype::f16 ? "f16" : dt == kv_dtype::q8 ? "q8" : "f32") +
                               (by_column ? " by column" : " by row");
      EXPECT_EQ(whole.k, by_head.k) << what;
      EXPECT_EQ(whole.v, by_head.v) << what;
      EXPECT_EQ(whole.ks, by_head.ks) << what;
      EXPECT_EQ(whole.vs, by_head.vs) << what;
    }
}

}  // namespace

namespace {

// The fast order's arithmetic stated plainly, one value at a time (what model/attention_avx512.cpp
// and model/attention_avx2.cpp compute lane by lane). This file is built without FMA flags, so
// nothing below is contracted: every fused multiply-add is a std::fma.

// ggml's exp (model/detail/avx_exp.hpp).
float ggml_exp(float x) {
  const float z = std::fma(x, 0x1.715476p+0f, 0x1.8p23f);
  const float n = z - 0x1.8p23f;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float hi = std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f);
  const float mid = std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f);
  const float lo = std::fma(0x1.ffffecp-1f, b, 1.0f);
  const float j = std::fma(std::fma(hi, u, mid), u, lo);
  if (std::isnan(n)) return j;
  if (std::fabs(n) > 192.0f) return n > 0.0f ? INFINITY : 0.0f;
  return std::ldexp(j, static_cast<int>(n));
}

// 16 lanes reduced as _mm512_reduce_add_ps does: upper 8 + lower 8, 4 + 4, then 0+2 and 1+3.
float reduce16(const float (&l)[16]) {
  float t[8];
  for (int i = 0; i < 8; ++i) t[i] = l[i + 8] + l[i];
  float f[4];
  for (int i = 0; i < 4; ++i) f[i] = t[i + 4] + t[i];
  return (f[0] + f[2]) + (f[1] + f[3]);
}

// 16 lanes reduced as the kernels' transposing reduction does: per 4 lanes (0 + 2) + (1 + 3),
// then pairs of those, then the two halves.
float transpose_sum16(const float (&l)[16]) {
  float s[4];
  for (int k = 0; k < 4; ++k) s[k] = (l[4 * k] + l[4 * k + 2]) + (l[4 * k + 1] + l[4 * k + 3]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// One KV head's group in the fast order: outputs (group * head_dim) and each head's (max, sum).
void fast_order_plainly(const float* q, const kv_layer_view& kv, const int32_t* table, int32_t n_ctx, int g,
                        int group, float scale, float* out, float* stats) {
  const int hd = kv.head_dim;
  auto row_of = [&](int32_t p) { return kv.offset(table[p / kv.block_size], g, p % kv.block_size); };
  auto k_at = [&](int32_t p, int i) { return kv.k_index(table[p / kv.block_size], g, p % kv.block_size, i); };
  auto k_value = [&](int32_t p, int i) -> float {
    if (kv.dtype == kv_dtype::f32) return static_cast<const float*>(kv.k)[k_at(p, i)];
    return fp16_to_fp32(static_cast<const uint16_t*>(kv.k)[k_at(p, i)]);
  };
  auto v_value = [&](int32_t p, int i) -> float {
    const int64_t at = row_of(p) + i;
    if (kv.dtype == kv_dtype::f32) return static_cast<const float*>(kv.v)[at];
    if (kv.dtype == kv_dtype::q8) return static_cast<float>(static_cast<const int8_t*>(kv.v)[at]);
    return fp16_to_fp32(static_cast<const uint16_t*>(kv.v)[at]);
  };
  for (int h = 0; h < group; ++h) {
    const float* qh = q + (static_cast<int64_t>(g) * group + h) * hd;
    std::vector<float> s(static_cast<size_t>(n_ctx));
    // q8: the query's codes and scale per 32 values, as q8 rows are quantized
    std::vector<int> qc(static_cast<size_t>(hd));
    std::vector<float> qd(static_cast<size_t>(hd / 32));
    if (kv.dtype == kv_dtype::q8)
      for (int b = 0; b < hd / 32; ++b) {
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(qh[32 * b + i]));
        qd[static_cast<size_t>(b)] = amax / 127.0f;
        const float id = amax > 0.0f ? 1.0f / qd[static_cast<size_t>(b)] : 0.0f;
        for (int i = 0; i < 32; ++i) qc[static_cast<size_t>(32 * b + i)] = static_cast<int>(std::nearbyint(qh[32 * b + i] * id));
      }
    for (int32_t p = 0; p < n_ctx; ++p) {
      float score;
      if (kv.dtype == kv_dtype::q8) {  // exact block dot products, then the scales
        float acc = 0.0f;
        for (int b = 0; b < hd / 32; ++b) {
          int dot = 0;
          for (int i = 32 * b; i < 32 * b + 32; ++i)
            dot += (static_cast<int>(static_cast<const uint8_t*>(kv.k)[k_at(p, i)]) - 128) * qc[static_cast<size_t>(i)];
          acc = b == 0 ? static_cast<float>(dot) * qd[0] : std::fma(static_cast<float>(dot), qd[static_cast<size_t>(b)], acc);
        }
        score = acc * (kv.k_scale[row_of(p) / hd] * scale);
      } else if (kv.k_by_column) {  // four FMA chains over the values, d % 4 apart
        float a[4] = {0, 0, 0, 0};
        for (int d = 0; d < hd; ++d) a[d % 4] = std::fma(k_value(p, d), qh[d], a[d % 4]);
        score = ((a[0] + a[1]) + (a[2] + a[3])) * scale;
      } else {  // 16 lanes, value i in lane i % 16, then the transposing reduction
        float l[16];
        for (int i = 0; i < 16; ++i) l[i] = k_value(p, i) * qh[i];
        for (int i = 16; i < hd; ++i) l[i % 16] = std::fma(k_value(p, i), qh[i], l[i % 16]);
        score = transpose_sum16(l) * scale;
      }
      s[static_cast<size_t>(p)] = score;
    }
    float mx = s[0];
    for (float x : s) mx = std::max(mx, x);
    float lanes[16] = {};
    for (int32_t p = 0; p < n_ctx; ++p) lanes[p % 16] += (s[static_cast<size_t>(p)] = ggml_exp(s[static_cast<size_t>(p)] - mx));
    const float total = reduce16(lanes);
    stats[2 * h] = mx;
    stats[2 * h + 1] = total;
    const float inv = 1.0f / total;
    for (int i = 0; i < hd; ++i) {
      float acc = 0.0f;
      for (int32_t p = 0; p < n_ctx; ++p) {
        float w = s[static_cast<size_t>(p)];
        if (kv.dtype == kv_dtype::q8) w *= kv.v_scale[row_of(p) / hd];
        acc = std::fma(w, v_value(p, i), acc);
      }
      out[static_cast<int64_t>(h) * hd + i] = acc * inv;
    }
  }
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The fast order gives the same bits on every CPU: the AVX2 and AVX-512 builds of its kernel (each
// where this CPU runs it; an AVX-512 CI host runs both) against the plain statement above, for
// every storage type and layout, head sizes 64 and 128, groups that fill passes of 3 and 4 heads
// or not, contexts ending mid-chunk, blocks of 8, 16, 20 and 32; then a split query's parts and
// their merge.
TEST(PagedAttention, FastOrderIsTheSameOnEveryIsa) {
  struct kernel {
    const char* name;
    bool runs;
    void (*attend)(const float*, const kv_layer_view&, const int32_t*, int32_t, int, int, float, float*, float*, float*);
    void (*merge)(const float*, const float*, int, int, int, float*);
  };
  const bool f16c_fma = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx");
  const bool avx512 = f16c_fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const kernel kernels[] = {
      {"avx2", f16c_fma && __builtin_cpu_supports("avx2"), troupe::model::detail::attend_avx2_group,
       troupe::model::detail::merge_parts_avx2},
      {"avx512", avx512, troupe::model::detail::attend_avx512_group, troupe::model::detail::merge_parts_avx512},
  };
  if (!kernels[0].runs && !kernels[1].runs) GTEST_SKIP() << "no fast attention kernel on this CPU";
  const attention_case cases[] = {
      {3, 64, 3, 16, 1},  {3, 64, 3, 16, 45}, {2, 64, 5, 16, 77}, {4, 64, 1, 8, 9},   {2, 64, 7, 32, 150},
      {1, 128, 3, 16, 33}, {2, 128, 4, 32, 70}, {2, 64, 3, 20, 61}, {1, 64, 4, 16, 300},
  };
  struct layout {
    kv_dtype dt;
    bool by_column;
  };
  const layout layouts[] = {{kv_dtype::f16, true}, {kv_dtype::f16, false}, {kv_dtype::f32, false}, {kv_dtype::q8, true}};
  int compared = 0;
  for (const auto& c : cases)
    for (const auto& l : layouts) {
      std::mt19937 rng(static_cast<unsigned>(c.n_ctx * 17 + c.group));
      std::normal_distribution<float> d(0.0f, 1.5f);
      const int kvd = c.n_kv_heads * c.head_dim, n_q = c.n_kv_heads * c.group;
      const int n_blocks = (c.n_ctx + c.block_size - 1) / c.block_size;
      std::vector<int32_t> table(static_cast<size_t>(n_blocks));
      for (int b = 0; b < n_blocks; ++b) table[static_cast<size_t>(b)] = (b * 5 + 3) % n_blocks;  // scattered
      const size_t rows = static_cast<size_t>(n_blocks) * c.block_size * c.n_kv_heads;
      std::vector<uint8_t> kmem(rows * c.head_dim * kv_elem_size(l.dt)), vmem(kmem.size());
      std::vector<float> ks(rows), vs(rows);
      kv_layer_view kv;
      kv.k = kmem.data();
      kv.v = vmem.data();
      kv.dtype = l.dt;
      if (l.dt == kv_dtype::q8) {
        kv.k_scale = ks.data();
        kv.v_scale = vs.data();
      }
      kv.n_kv_heads = c.n_kv_heads;
      kv.head_dim = c.head_dim;
      kv.block_size = c.block_size;
      kv.k_by_column = l.by_column;
      std::vector<float> K(static_cast<size_t>(kvd)), V(K.size());
      for (int p = 0; p < c.n_ctx; ++p) {
        for (auto& x : K) x = d(rng);
        for (auto& x : V) x = d(rng);
        kv_store(kv, table.data(), p, K.data(), V.data());
      }
      std::vector<float> q(static_cast<size_t>(n_q) * c.head_dim);
      for (auto& x : q) x = d(rng);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const std::string what = std::string(l.dt == kv_dtype::f16 ? "f16" : l.dt == kv_dtype::q8 ? "q8" : "f32") +
                               (l.by_column ? " by column" : " by row") + ", head_dim " + std::to_string(c.head_dim) +
                               ", group " + std::to_string(c.group) + ", n_ctx " + std::to_string(c.n_ctx) +
                               ", blocks of " + std::to_string(c.block_size);
      const size_t group_out = static_cast<size_t>(c.group) * c.head_dim;
      std::vector<float> want(group_out), want_stats(2 * static_cast<size_t>(c.group));
      std::vector<float> got(group_out), got_stats(want_stats.size()), scratch(static_cast<size_t>(c.n_ctx) * c.group);
      for (const auto& k : kernels) {
        if (!k.runs || (l.dt == kv_dtype::q8 && k.attend == troupe::model::detail::attend_avx512_group &&
                        !__builtin_cpu_supports("avx512vnni")))
          continue;
        for (int g = 0; g < c.n_kv_heads; ++g) {
          fast_order_plainly(q.data(), kv, table.data(), c.n_ctx, g, c.group, scale, want.data(), want_stats.data());
          k.attend(q.data(), kv, table.data(), c.n_ctx, g, c.group, scale, got.data(), scratch.data(), got_stats.data());
          int wrong = 0;
          for (size_t i = 0; i < group_out; ++i) wrong += !same_bits(got[i], want[i]);
          for (size_t i = 0; i < got_stats.size(); ++i) wrong += !same_bits(got_stats[i], want_stats[i]);
          EXPECT_EQ(wrong, 0) << k.name << ": " << what << ", KV head " << g << " (first output " << got[0]
                              << " against " << want[0] << ")";
          ++compared;
        }
        // A split query: its parts are each the plain statement over their own blocks, and the
        // merge is the same on every ISA.
        const attention_split sp = split_attention(kv, attention_order::fast, c.n_ctx);
        if (sp.n_parts == 1) continue;
        std::vector<float> parts(static_cast<size_t>(sp.n_parts) * group_out), stats(2 * sp.n_parts * c.group);
        for (int p = 0; p < sp.n_parts; ++p) {
          const int32_t p0 = p * sp.part_len, n = std::min(c.n_ctx, p0 + sp.part_len) - p0;
          k.attend(q.data(), kv, table.data() + p0 / c.block_size, n, 0, c.group, scale, parts.data() + p * group_out,
                   scratch.data(), stats.data() + 2 * p * c.group);
          fast_order_plainly(q.data(), kv, table.data() + p0 / c.block_size, n, 0, c.group, scale, want.data(),
                             want_stats.data());
          EXPECT_TRUE(std::equal(want.begin(), want.end(), parts.begin() + p * group_out, same_bits))
              << k.name << ": " << what << ", part " << p;
        }
        std::vector<float> merged(group_out), merged_by_other(group_out);
        k.merge(parts.data(), stats.data(), sp.n_parts, c.group, c.head_dim, merged.data());
        for (const auto& other : kernels) {
          if (!other.runs) continue;
          other.merge(parts.data(), stats.data(), sp.n_parts, c.group, c.head_dim, merged_by_other.data());
          EXPECT_TRUE(std::equal(merged.begin(), merged.end(), merged_by_other.begin(), same_bits))
              << k.name << " and " << other.name << " merge differently: " << what;
        }
      }
    }
  EXPECT_GT(compared, 0);
}

}  // namespace
