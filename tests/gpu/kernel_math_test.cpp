// The CUDA kernels' per-element math (gpu/kernel_math.hpp), compiled here by the host compiler,
// against the CPU engine's own implementations on random data: the same numbers within float
// tolerance, the same block-table indexing, the same sampled tokens for the same seeds.
#include "gpu/kernel_math.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "model/cpu_ops.hpp"
#include "model/paged_attention.hpp"
#include "model/quant.hpp"
#include "model/sampler.hpp"

namespace m = troupe::gpu::math;
using namespace troupe::model;

namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.0f, std::fabs(b[i])));
  EXPECT_LE(worst, tol) << what;
}

}  // namespace

TEST(KernelMath, HalfConversionMatchesEngineBitForBit) {
  std::mt19937 rng(1);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 1e6f, -1e6f, 6.1e-5f, 5.96e-8f, 2.98e-8f,
                           1e-10f, INFINITY, -INFINITY, 0.333333f, 1.00048828125f, 1.000732421875f};
  auto r = random_vec(20000, rng, 3.0f);
  xs.insert(xs.end(), r.begin(), r.end());
  auto tiny = random_vec(5000, rng, 1e-5f);
  xs.insert(xs.end(), tiny.begin(), tiny.end());
  for (float x : xs) {
    const uint16_t h = m::float_to_half(x);
    ASSERT_EQ(h, fp32_to_fp16(x)) << "x=" << x;
    const float back = m::half_to_float(h), want = fp16_to_fp32(h);
    ASSERT_EQ(std::memcmp(&back, &want, 4), 0) << "h=" << h;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu)) continue;  // NaN payloads may differ
    const float a = m::half_to_float(static_cast<uint16_t>(h)), b = fp16_to_fp32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << "h=" << h;
  }
}

TEST(KernelMath, SplitHalfKeepsFloatAccuracy) {
  std::mt19937 rng(11);
  for (float x : random_vec(10000, rng, 4.0f)) {
    uint16_t hi, lo;
    m::split_half(x, &hi, &lo);
    EXPECT_LE(std::fabs(m::half_to_float(hi) + m::half_to_float(lo) - x), std::fabs(x) * 1e-6f + 1e-7f) << x;
    EXPECT_EQ(hi, fp32_to_fp16(x));
  }
}

// Activations beyond fp16's range enter a GEMM clamped, never as inf (+ -inf = NaN in every
// output of the row): exact up to 2 x 65504 when split, clamped there; plain inputs clamp at 65504.
TEST(KernelMath, GemmInputsSaturateInsteadOfOverflowing) {
  for (float x : {65504.0f, 65519.0f, 65520.0f, 70000.5f, 100000.0f, 131008.0f}) {
    for (float v : {x, -x}) {
      uint16_t hi, lo;
      m::split_half(v, &hi, &lo);
      const float sum = m::half_to_float(hi) + m::half_to_float(lo);
      EXPECT_TRUE(std::isfinite(sum)) << v;
      EXPECT_LE(std::fabs(sum - v), 0.5f) << v;
      EXPECT_EQ(m::half_to_float(m::gemm_input_half(v)), v > 0 ? 65504.0f : -65504.0f) << v;
    }
  }
  for (float v : {1e6f, INFINITY, -1e9f, -INFINITY}) {
    uint16_t hi, lo;
    m::split_half(v, &hi, &lo);
    EXPECT_EQ(std::fabs(m::half_to_float(hi) + m::half_to_float(lo)), 131008.0f) << v;
  }
  uint16_t hi, lo;
  m::split_half(NAN, &hi, &lo);
  EXPECT_TRUE(std::isnan(m::half_to_float(hi)));
  EXPECT_EQ(m::half_to_float(m::gemm_input_half(-3.25f)), -3.25f);
}

TEST(KernelMath, RmsNormMatchesCpu) {
  std::mt19937 rng(2);
  for (int n : {64, 576, 2048, 4096}) {
    auto x = random_vec(n, rng, 2.0f), w = random_vec(n, rng);
    std::vector<float> want(n), got(n);
    rms_norm(x.data(), w.data(), want.data(), n, 1e-5f);
    m::rms_norm_row(x.data(), w.data(), got.data(), n, 1e-5f);
    expect_close(got, want, 2e-6f, "rms_norm");
  }
}

TEST(KernelMath, RopeMatchesCpuBothStyles) {
  std::mt19937 rng(3);
  for (bool neox : {false, true}) {
    for (int head_dim : {64, 128}) {
      for (int n_rot : {head_dim, head_dim / 2}) {
        for (int32_t pos : {0, 1, 7, 511, 4095}) {
          const int n_heads = 3;
          auto x = random_vec(static_cast<size_t>(n_heads) * head_dim, rng);
          auto want = x, got = x;
          std::vector<float> c(n_rot / 2), s(n_rot / 2);
          rope_table(pos, n_rot, 10000.0f, 1.0f, c.data(), s.data());
          apply_rope(want.data(), n_heads, head_dim, n_rot, neox ? rope_style::neox : rope_style::normal, c.data(),
                     s.data());
          for (int h = 0; h < n_heads; ++h) m::rope_head(got.data() + h * head_dim, neox, n_rot, pos, 10000.0f, 1.0f);
          expect_close(got, want, 1e-6f, neox ? "rope neox" : "rope normal");
        }
      }
    }
  }
}

TEST(KernelMath, SwigluMatchesCpu) {
  std::mt19937 rng(4);
  auto g = random_vec(4096, rng, 4.0f), u = random_vec(4096, rng);
  auto want = g;
  silu_mul(want.data(), u.data(), static_cast<int64_t>(want.size()));
  std::vector<float> got(g.size());
  for (size_t i = 0; i < g.size(); ++i) got[i] = m::silu_mul(g[i], u[i]);
  expect_close(got, want, 1e-6f, "silu_mul");
}

namespace {

// A paged KV layer with shuffled block tables for a few sequences, filled by the CPU engine's
// kv_store and by kv_write_elem into a second buffer.
struct kv_fixture {
  int n_kv_heads, head_dim, block_size, n_blocks;
  kv_dtype dtype;
  std::vector<uint8_t> k_cpu, v_cpu, k_gpu, v_gpu;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> lens;

  kv_fixture(int kvh, int hd, int bs, kv_dtype dt, const std::vector<int32_t>& seq_lens, std::mt19937& rng)
      : n_kv_heads(kvh), head_dim(hd), block_size(bs), dtype(dt), lens(seq_lens) {
    int need = 0;
    for (auto l : lens) need += (l + bs - 1) / bs;
    n_blocks = need + 3;
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    for (auto l : lens) {
      std::vector<int32_t> t;
      for (int i = 0; i < (l + bs - 1) / bs; ++i) t.push_back(ids[next++]);
      tables.push_back(t);
    }
    const size_t bytes = static_cast<size_t>(n_blocks) * bs * kvh * hd * (dt == kv_dtype::f16 ? 2 : 4);
    k_cpu.assign(bytes, 0);
    v_cpu.assign(bytes, 0);
    k_gpu.assign(bytes, 0);
    v_gpu.assign(bytes, 0);
  }
  kv_layer_view view() {
    kv_layer_view v;
    v.k = k_cpu.data();
    v.v = v_cpu.data();
    v.dtype = dtype;
    v.n_kv_heads = n_kv_heads;
    v.head_dim = head_dim;
    v.block_size = block_size;
    return v;
  }
  m::kv_geom geom() const { return {n_kv_heads, head_dim, block_size}; }
};

template <class T>
void write_both(kv_fixture& f, std::mt19937& rng) {
  const int nkv = f.n_kv_heads * f.head_dim;
  const auto g = f.geom();
  for (size_t s = 0; s < f.lens.size(); ++s)
    for (int32_t pos = 0; pos < f.lens[s]; ++pos) {
      auto k = random_vec(nkv, rng), v = random_vec(nkv, rng);
      kv_store(f.view(), f.tables[s].data(), pos, k.data(), v.data());
      for (int e = 0; e < nkv; ++e)
        m::kv_write_elem(reinterpret_cast<T*>(f.k_gpu.data()), reinterpret_cast<T*>(f.v_gpu.data()), g,
                         f.tables[s].data(), pos, e, k.data(), v.data());
    }
}

template <class T>
void check_attention(kv_dtype dt, int n_head, int n_kv_heads, int head_dim, int block_size) {
  std::mt19937 rng(static_cast<uint32_t>(n_head * 131 + head_dim + block_size));
  kv_fixture f(n_kv_heads, head_dim, block_size, dt, {1, 17, 100, 300}, rng);
  write_both<T>(f, rng);
  ASSERT_EQ(f.k_cpu, f.k_gpu) << "K written to different slots or rounded differently";
  ASSERT_EQ(f.v_cpu, f.v_gpu);

  const int group = n_head / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const auto g = f.geom();
  for (size_t s = 0; s < f.lens.size(); ++s) {
    // Each sequence attends at its last position and at a position in the middle (a prefill token).
    for (int32_t n_ctx : {f.lens[s], (f.lens[s] + 1) / 2}) {
      auto q = random_vec(static_cast<size_t>(n_head) * head_dim, rng);
      std::vector<float> want(q.size()), got(q.size()), scratch(static_cast<size_t>(n_ctx) * group);
      for (int kvh = 0; kvh < n_kv_heads; ++kvh)
        paged_attention_group(q.data(), f.view(), f.tables[s].data(), n_ctx, kvh, group, scale, want.data(),
                              scratch.data());
      for (int h = 0; h < n_head; ++h)
        m::attend_head(q.data() + h * head_dim, reinterpret_cast<const T*>(f.k_gpu.data()),
                       reinterpret_cast<const T*>(f.v_gpu.data()), g, f.tables[s].data(), n_ctx, h, group, scale,
                       got.data() + h * head_dim);
      expect_close(got, want, 2e-5f, "attention");
    }
  }
}

}  // namespace

TEST(KernelMath, PagedAttentionF16MatchesCpuGqa) { check_attention<uint16_t>(kv_dtype::f16, 9, 3, 64, 16); }
TEST(KernelMath, PagedAttentionF32MatchesCpuGqa) { check_attention<float>(kv_dtype::f32, 32, 8, 64, 16); }
TEST(KernelMath, PagedAttentionMhaOddBlockSize) { check_attention<uint16_t>(kv_dtype::f16, 4, 4, 128, 7); }
TEST(KernelMath, PagedAttentionBlockSizeOne) { check_attention<float>(kv_dtype::f32, 8, 2, 32, 1); }

TEST(KernelMath, OnlineSoftmaxMergeEqualsOnePass) {
  std::mt19937 rng(5);
  auto s = random_vec(257, rng, 5.0f);
  auto v = random_vec(257, rng);
  auto run = [&](size_t b, size_t e, m::online_softmax& st) {
    float acc = 0.0f;
    for (size_t i = b; i < e; ++i) {
      float c, p;
      st.push(s[i], &c, &p);
      acc = acc * c + p * v[i];
    }
    return acc;
  };
  m::online_softmax all, a, b;
  const float full = run(0, s.size(), all) / all.l;
  float acc_a = run(0, 100, a);
  const float acc_b = run(100, s.size(), b);
  float ca, cb;
  a.merge(b, &ca, &cb);
  acc_a = acc_a * ca + acc_b * cb;
  EXPECT_NEAR(acc_a / a.l, full, 1e-5f);
  double ref_z = 0, ref = 0;
  const float mx = *std::max_element(s.begin(), s.end());
  for (size_t i = 0; i < s.size(); ++i) {
    ref_z += std::exp(s[i] - mx);
    ref += std::exp(s[i] - mx) * v[i];
  }
  EXPECT_NEAR(full, ref / ref_z, 1e-5);
}

namespace {

// The device sampler's steps run serially: rank candidates, keep top_k, pick with draw
// (seed, n_generated).
int32_t device_rule_sample(const std::vector<float>& logits, const sampling_params& p, int64_t n_generated) {
  const auto n_vocab = static_cast<int32_t>(logits.size());
  if (p.temperature <= 0.0f) {
    float v = 0.0f;
    int32_t best = -1;
    for (int32_t i = 0; i < n_vocab; ++i) m::argmax_combine(&v, &best, logits[static_cast<size_t>(i)], i);
    return best;
  }
  std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    return m::ranks_before(logits[static_cast<size_t>(a)], a, logits[static_cast<size_t>(b)], b);
  });
  const int n = p.top_k > 0 ? std::min(p.top_k, n_vocab) : n_vocab;
  std::vector<float> sorted(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sorted[static_cast<size_t>(i)] = logits[static_cast<size_t>(idx[static_cast<size_t>(i)])];
  std::vector<double> scratch(static_cast<size_t>(n));
  const int pick = m::pick_from_sorted(sorted.data(), n, p.temperature, p.top_p, m::uniform01(p.seed, n_generated),
                                       scratch.data());
  return idx[static_cast<size_t>(pick)];
}

}  // namespace

TEST(KernelMath, SamplingMatchesCpuSamplerForSameSeeds) {
  std::mt19937 rng(6);
  struct setting {
    float t;
    int32_t k;
    float p;
  };
  const setting settings[] = {{0.0f, 0, 1.0f}, {1.0f, 0, 1.0f}, {0.7f, 40, 1.0f}, {0.8f, 0, 0.9f},
                              {1.3f, 50, 0.95f}, {0.5f, 1, 1.0f}, {2.0f, 5, 0.5f}};
  int differences = 0, draws = 0;
  for (int trial = 0; trial < 20; ++trial) {
    auto logits = random_vec(1000, rng, 3.0f);
    logits[17] = logits[18] = 9.0f;  // a tie at the top goes to the lower id
    for (const auto& s : settings) {
      for (uint64_t seed : {0ull, 1ull, 42ull, 0xdeadbeefull}) {
        for (int64_t n_gen : {0, 1, 5, 1000}) {
          sampling_params p;
          p.temperature = s.t;
          p.top_k = s.k;
          p.top_p = s.p;
          p.seed = seed;
          const int32_t want = sample_token(logits.data(), 1000, p, {}, n_gen).token;
          const int32_t got = device_rule_sample(logits, p, n_gen);
          differences += want != got;
          ++draws;
        }
      }
    }
  }
  EXPECT_EQ(differences, 0) << "of " << draws << " draws";
}

TEST(KernelMath, RandomDrawsAreReproducibleAndSeedDependent) {
  EXPECT_EQ(m::uniform01(7, 3), m::uniform01(7, 3));
  EXPECT_NE(m::uniform01(7, 3), m::uniform01(8, 3));
  EXPECT_NE(m::uniform01(7, 3), m::uniform01(7, 4));
  double mean = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = m::uniform01(123, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    mean += u;
  }
  EXPECT_NEAR(mean / 10000, 0.5, 0.02);
}
