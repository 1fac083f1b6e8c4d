#include "model/paged_attention.hpp"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "model/cpu_ops.hpp"
#include "model/detail/attention_avx2.hpp"
#include "model/detail/attention_avx512.hpp"
#include "model/quant.hpp"

namespace troupe::model {

namespace {

constexpr int k_max_group = 16;

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// Element access for the storage types (store: one row of n values; scale: q8's, else unused).
struct f16_elems {
  using type = uint16_t;
  static __m256 load8(const type* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float load1(const type* p) { return fp16_to_fp32(*p); }
  static void store(type* dst, const float* src, int n, float*) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
  }
};
struct f32_elems {
  using type = float;
  static __m256 load8(const type* p) { return _mm256_loadu_ps(p); }
  static float load1(const type* p) { return *p; }
  static void store(type* dst, const float* src, int n, float*) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }
};
// F16C by CPUID (leaf 1, ECX bit 29): clang before 15 (the fuzz build's) knows no "f16c" in
// __builtin_cpu_supports.
bool cpu_has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

// What model/attention_avx512.cpp is compiled for (cmake/TroupeKernelFlags.cmake).
bool cpu_has_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                             cpu_has_f16c() && __builtin_cpu_supports("fma");
  return avx512;
}

// What model/attention_avx2.cpp is compiled for.
bool cpu_has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return avx2;
}

// Which build of the fast kernel attends over a view: the AVX-512 one where the CPU has it (and,
// for q8 K, VNNI, which scores it), else the AVX2 one. Both give the same bits.
enum class fast_kernel { none, avx2, avx512 };

fast_kernel fast_kernel_for(kv_dtype dtype, int head_dim) {
  kv_layer_view probe;
  probe.head_dim = head_dim;
  if (!detail::attend_avx512_fits(probe)) return fast_kernel::none;  // (the AVX2 kernel fits the same sizes)
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  if (cpu_has_avx512() && (dtype != kv_dtype::q8 || vnni)) return fast_kernel::avx512;
  return cpu_has_avx2() ? fast_kernel::avx2 : fast_kernel::none;
}

void attend_fast(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head,
                 int group, float scale, float* og, float* scratch, float* stats) {
  if (fast_kernel_for(kv.dtype, kv.head_dim) == fast_kernel::avx512)
    detail::attend_avx512_group(q, kv, block_table, n_ctx, kv_head, group, scale, og, scratch, stats);
  else
    detail::attend_avx2_group(q, kv, block_table, n_ctx, kv_head, group, scale, og, scratch, stats);
}

// q8 rows are only stored here; the fast kernels read them.
struct q8_elems {
  using type = int8_t;
  // Int8 codes and a scale (max |x| / 127). A row too small for 1 / scale to be finite is stored
  // as zeros; a NaN or infinite value makes the scale NaN, so the row reads back as NaN, as fp16
  // memory would keep it.
  static void store(type* dst, const float* src, int n, float* scale) {
    if (n % 16 == 0 && cpu_has_avx512()) return detail::quantize_row_q8(src, n, dst, scale);
    if (n % 8 == 0 && cpu_has_avx2()) return detail::quantize_row_q8_avx2(src, n, dst, scale);
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < n; ++i) {
      finite = finite && std::isfinite(src[i]);
      amax = std::max(amax, std::fabs(src[i]));
    }
    const float d = amax / 127.0f;
    const float id = finite && d > 0.0f && std::isfinite(1.0f / d) ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; ++i) {
      const float c = finite ? std::nearbyint(src[i] * id) : 0.0f;
      dst[i] = static_cast<type>(std::clamp(c, -127.0f, 127.0f));
    }
    *scale = finite ? d : std::numeric_limits<float>::quiet_NaN();
  }
};

// One KV head's K row and/or V row (either may be null) of the token at `pos`.
template <class E>
void store_head_t(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, int h, const float* kh,
                  const float* vh) {
  const int32_t block = block_table[pos / kv.block_size];
  const int slot = pos % kv.block_size;
  auto* K = static_cast<typename E::type*>(kv.k);
  auto* V = static_cast<typename E::type*>(kv.v);
  const int64_t off = kv.offset(block, h, slot);
  const int64_t row = off / kv.head_dim;  // q8: the row's scale
  if (kh) {
    float* ks = kv.k_scale ? kv.k_scale + row : nullptr;
    // By column: the row as it would be stored, then each value into its column (kv.k_index).
    if (kv.k_by_column && !std::is_same_v<E, f32_elems>) {
      thread_local std::vector<typename E::type> staged;
      staged.resize(static_cast<size_t>(kv.head_dim));
      E::store(staged.data(), kh, kv.head_dim, ks);
      const int64_t region = kv.offset(block, h, 0);
      if constexpr (std::is_same_v<E, q8_elems>) {  // 4 values side by side, + 128
        auto* col = reinterpret_cast<uint8_t*>(K) + region + 4 * slot;
        for (int d = 0; d < kv.head_dim; d += 4)
          for (int i = 0; i < 4; ++i)
            col[static_cast<int64_t>(d) * kv.block_size + i] = static_cast<uint8_t>(staged[static_cast<size_t>(d + i)] + 128);
      } else {
        auto* col = K + region + slot;
        for (int d = 0; d < kv.head_dim; ++d) col[static_cast<int64_t>(d) * kv.block_size] = staged[static_cast<size_t>(d)];
      }
    } else {
      E::store(K + off, kh, kv.head_dim, ks);
    }
  }
  if (vh) E::store(V + off, vh, kv.head_dim, kv.v_scale ? kv.v_scale + row : nullptr);
}

// 16 lane values summed as AVX-512's horizontal add does: upper 8 + lower 8, then 4 + 4, then
// lanes 0+2 and 1+3, then those two. lo and hi are lanes 0-7 and 8-15.
inline float sum16(__m256 lo, __m256 hi) { return hsum(_mm256_add_ps(hi, lo)); }

// q . k for n a multiple of 64 in ggml_vec_dot_f32's AVX-512 order: four 16-lane FMA accumulators
// over chunks of 64, combined as (0 + 2) + (1 + 3), then one 16-lane sum.
inline float dot64(const float* a, const float* b, int n) {
  __m256 s[4][2];
  for (auto& r : s) r[0] = r[1] = _mm256_setzero_ps();
  for (int c = 0; c < n; c += 64)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        const int o = c + 16 * j + 8 * h;
        s[j][h] = _mm256_fmadd_ps(_mm256_loadu_ps(a + o), _mm256_loadu_ps(b + o), s[j][h]);
      }
  const __m256 lo = _mm256_add_ps(_mm256_add_ps(s[0][0], s[2][0]), _mm256_add_ps(s[1][0], s[3][0]));
  const __m256 hi = _mm256_add_ps(_mm256_add_ps(s[0][1], s[2][1]), _mm256_add_ps(s[1][1], s[3][1]));
  return sum16(lo, hi);
}

template <class E>
void load_row(const typename E::type* src, float* dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, E::load8(src + i));
  for (; i < n; ++i) dst[i] = E::load1(src + i);
}

template <class E>
void attend_t(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head,
              int group, float scale, float* out, float* scratch, attention_order order) {
  const int hd = kv.head_dim;
  const int bs = kv.block_size;
  const auto* K = static_cast<const typename E::type*>(kv.k);
  const auto* V = static_cast<const typename E::type*>(kv.v);
  const float* qg = q + static_cast<int64_t>(kv_head) * group * hd;
  float* og = out + static_cast<int64_t>(kv_head) * group * hd;
  const bool simd = hd % 8 == 0 && group <= k_max_group;

  // Scores: scratch[j * n_ctx + pos] = q_j . k_pos * scale, in ggml_vec_dot_f32's order (what
  // llama.cpp runs for KQ) when the head size allows it.
  if (simd && hd == 64) {
    // The common head size, with the key row widened once into registers for the group's heads:
    // ggml_vec_dot_f32 on one chunk of 64 is four 16-lane products (FMAs from zero), summed
    // (0 + 2) + (1 + 3), then one 16-lane sum; register 2c + h holds lanes 8h..8h+7 of product c.
    const __m256 zero = _mm256_setzero_ps();
    for (int32_t pos = 0; pos < n_ctx; ++pos) {
      const auto* kp = K + kv.offset(block_table[pos / bs], kv_head, pos % bs);
      __m256 k[8];
      for (int i = 0; i < 8; ++i) k[i] = E::load8(kp + 8 * i);
      for (int j = 0; j < group; ++j) {
        const float* qj = qg + static_cast<int64_t>(j) * hd;
        __m256 p[8];
        for (int i = 0; i < 8; ++i) p[i] = _mm256_fmadd_ps(k[i], _mm256_loadu_ps(qj + 8 * i), zero);
        const __m256 lo = _mm256_add_ps(_mm256_add_ps(p[0], p[4]), _mm256_add_ps(p[2], p[6]));
        const __m256 hi = _mm256_add_ps(_mm256_add_ps(p[1], p[5]), _mm256_add_ps(p[3], p[7]));
        scratch[static_cast<int64_t>(j) * n_ctx + pos] = sum16(lo, hi) * scale;
      }
    }
  } else if (simd && hd % 64 == 0) {
    thread_local std::vector<float> krow;
    if (krow.size() < static_cast<size_t>(hd)) krow.resize(static_cast<size_t>(hd));
    for (int32_t pos = 0; pos < n_ctx; ++pos) {
      const auto* kp = K + kv.offset(block_table[pos / bs], kv_head, pos % bs);
      const float* kf;
      if constexpr (std::is_same_v<E, f32_elems>) {
        kf = kp;
      } else {  // fp16: widen the row once for the group's heads
        load_row<E>(kp, krow.data(), hd);
        kf = krow.data();
      }
      for (int j = 0; j < group; ++j)
        scratch[static_cast<int64_t>(j) * n_ctx + pos] = dot64(kf, qg + static_cast<int64_t>(j) * hd, hd) * scale;
    }
  } else {
    for (int32_t pos = 0; pos < n_ctx; ++pos) {
      const auto* kp = K + kv.offset(block_table[pos / bs], kv_head, pos % bs);
      float* s = scratch + pos;  // s[j * n_ctx] is head j's score
      if (simd) {
        __m256 acc[k_max_group];
        for (int j = 0; j < group; ++j) acc[j] = _mm256_setzero_ps();
        for (int i = 0; i < hd; i += 8) {
          const __m256 kf = E::load8(kp + i);
          for (int j = 0; j < group; ++j)
            acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(qg + static_cast<int64_t>(j) * hd + i), kf, acc[j]);
        }
        for (int j = 0; j < group; ++j) s[static_cast<int64_t>(j) * n_ctx] = hsum(acc[j]) * scale;
      } else {
        for (int j = 0; j < group; ++j) {
          float d = 0.0f;
          for (int i = 0; i < hd; ++i) d += qg[static_cast<int64_t>(j) * hd + i] * E::load1(kp + i);
          s[static_cast<int64_t>(j) * n_ctx] = d * scale;
        }
      }
    }
  }

  // Softmax per query head over positions, in ggml's arithmetic (its expf, sums of 16 in double,
  // one multiplication by 1/sum): llama.cpp's greedy choices hinge on near-ties.
  for (int j = 0; j < group; ++j) {
    float* row = scratch + static_cast<int64_t>(j) * n_ctx;
    const float mx = *std::max_element(row, row + n_ctx);
    const auto inv = static_cast<float>(1.0 / exp_sum(row, mx, row, n_ctx));
    for (int32_t pos = 0; pos < n_ctx; ++pos) row[pos] *= inv;
  }

  if (!simd) {
    std::fill(og, og + static_cast<int64_t>(group) * hd, 0.0f);
    for (int32_t pos = 0; pos < n_ctx; ++pos) {
      const auto* vp = V + kv.offset(block_table[pos / bs], kv_head, pos % bs);
      for (int j = 0; j < group; ++j)
        for (int i = 0; i < hd; ++i)
          og[static_cast<int64_t>(j) * hd + i] += scratch[static_cast<int64_t>(j) * n_ctx + pos] * E::load1(vp + i);
    }
    return;
  }

  // Weighted sum of V, summed over positions as llama.cpp's KQV product does: position p goes to
  // partial sum p % m (m = 16 lanes for tinyBLAS, 64 = 4 x 16 for ggml_vec_dot_f32), each an FMA
  // chain in position order, and the partial sums are combined in that kernel's order.
  const int m = order == attention_order::batch ? 16 : 64;
  const int rows = std::min<int32_t>(m, n_ctx);  // partial sums beyond n_ctx stay zero: not stored
  thread_local std::vector<float> part;          // one head's partial sums: rows x hd
  if (part.size() < static_cast<size_t>(rows) * hd) part.resize(static_cast<size_t>(rows) * hd);
  for (int j = 0; j < group; ++j) {
    const float* wj = scratch + static_cast<int64_t>(j) * n_ctx;
    // Partial sum r: positions r, r + m, r + 2m, ... as one FMA chain from zero, kept in registers
    // 64 dims at a time.
    for (int i0 = 0; i0 < hd; i0 += 64) {
      const int n8 = std::min(hd - i0, 64) / 8;
      for (int r = 0; r < rows; ++r) {
        __m256 acc[8];
        for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
        for (int32_t pos = r; pos < n_ctx; pos += m) {
          const auto* vp = V + kv.offset(block_table[pos / bs], kv_head, pos % bs) + i0;
          const __m256 w = _mm256_set1_ps(wj[pos]);
          for (int k = 0; k < n8; ++k) acc[k] = _mm256_fmadd_ps(w, E::load8(vp + 8 * k), acc[k]);
        }
        float* dst = part.data() + static_cast<int64_t>(r) * hd + i0;
        for (int k = 0; k < n8; ++k) _mm256_storeu_ps(dst + 8 * k, acc[k]);
      }
    }
    const float* pj = part.data();
    for (int i = 0; i < hd; i += 8) {
      auto row = [&](int r) {
        return r < rows ? _mm256_loadu_ps(pj + static_cast<int64_t>(r) * hd + i) : _mm256_setzero_ps();
      };
      __m256 lane[16];  // lane l of the 16-wide accumulator, for 8 output dims
      for (int l = 0; l < 16; ++l)
        lane[l] = m == 16 ? row(l)
                          : _mm256_add_ps(_mm256_add_ps(row(l), row(32 + l)), _mm256_add_ps(row(16 + l), row(48 + l)));
      // AVX-512's horizontal add of 16 lanes: upper 8 + lower 8, 4 + 4, then 0+2 and 1+3, then the two
      for (int l = 0; l < 8; ++l) lane[l] = _mm256_add_ps(lane[l + 8], lane[l]);
      for (int l = 0; l < 4; ++l) lane[l] = _mm256_add_ps(lane[l + 4], lane[l]);
      const __m256 r = _mm256_add_ps(_mm256_add_ps(lane[0], lane[2]), _mm256_add_ps(lane[1], lane[3]));
      _mm256_storeu_ps(og + static_cast<int64_t>(j) * hd + i, r);
    }
  }
}

// A plain reference over any layout of fp16 or q8 memory: q8 when this CPU has no q8 kernel (or
// a view kept by row), fp16 by column when the fast kernel does not fit (views the backend never
// makes: kv_k_by_column says when it lays K out by column).
void attend_plain(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx, int kv_head,
                  int group, float scale, float* out, float* scratch) {
  const int hd = kv.head_dim;
  const bool q8 = kv.dtype == kv_dtype::q8;
  auto row_of = [&](int32_t pos) { return kv.offset(block_table[pos / kv.block_size], kv_head, pos % kv.block_size); };
  auto k_value = [&](int32_t pos, int i) -> float {
    const int64_t at = kv.k_index(block_table[pos / kv.block_size], kv_head, pos % kv.block_size, i);
    if (!q8) return fp16_to_fp32(static_cast<const uint16_t*>(kv.k)[at]);
    const int code = kv.k_by_column ? static_cast<int>(static_cast<const uint8_t*>(kv.k)[at]) - 128
                                    : static_cast<const int8_t*>(kv.k)[at];
    return static_cast<float>(code);
  };
  auto v_value = [&](int64_t at) -> float {
    return q8 ? static_cast<float>(static_cast<const int8_t*>(kv.v)[at]) : fp16_to_fp32(static_cast<const uint16_t*>(kv.v)[at]);
  };
  for (int j = 0; j < group; ++j) {
    const float* qj = q + (static_cast<int64_t>(kv_head) * group + j) * hd;
    float* s = scratch + static_cast<int64_t>(j) * n_ctx;
    for (int32_t pos = 0; pos < n_ctx; ++pos) {
      float dot = 0.0f;
      for (int i = 0; i < hd; ++i) dot += qj[i] * k_value(pos, i);
      s[pos] = dot * (q8 ? kv.k_scale[row_of(pos) / hd] : 1.0f) * scale;
    }
    const float inv = static_cast<float>(1.0 / exp_sum(s, max_value(s, n_ctx), s, n_ctx));
    float* o = out + (static_cast<int64_t>(kv_head) * group + j) * hd;
    std::fill(o, o + hd, 0.0f);
    for (int32_t pos = 0; pos < n_ctx; ++pos) {
      const int64_t off = row_of(pos);
      const float w = s[pos] * inv * (q8 ? kv.v_scale[off / hd] : 1.0f);
      for (int i = 0; i < hd; ++i) o[i] += w * v_value(off + i);
    }
  }
}


bool fast_kernel_fits(int head_dim) { return fast_kernel_for(kv_dtype::f16, head_dim) != fast_kernel::none; }

}  // namespace

bool kv_q8_supported(int head_dim) { return fast_kernel_for(kv_dtype::q8, head_dim) != fast_kernel::none; }

bool kv_k_by_column(kv_dtype dtype, int head_dim, bool fast_order) {
  if (dtype == kv_dtype::q8) return head_dim % 4 == 0;
  return dtype == kv_dtype::f16 && fast_order && fast_kernel_fits(head_dim);
}

void kv_store_head(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, int kv_head, const float* k,
                   const float* v) {
  if (kv.dtype == kv_dtype::f16) store_head_t<f16_elems>(kv, block_table, pos, kv_head, k, v);
  else if (kv.dtype == kv_dtype::q8) store_head_t<q8_elems>(kv, block_table, pos, kv_head, k, v);
  else store_head_t<f32_elems>(kv, block_table, pos, kv_head, k, v);
}

void kv_store(const kv_layer_view& kv, const int32_t* block_table, int32_t pos, const float* k, const float* v) {
  for (int h = 0; h < kv.n_kv_heads; ++h)
    kv_store_head(kv, block_table, pos, h, k + static_cast<int64_t>(h) * kv.head_dim, v + static_cast<int64_t>(h) * kv.head_dim);
}

namespace {
// A part spans at least this many positions (a part's fixed cost, its own prefetch start and
// softmax, stays small against its work), and a query has at most k_max_parts of them.
constexpr int32_t k_min_part = 64;
constexpr int k_max_parts = 8;

// Whether paged_attention_group runs the fast kernel for this view and order (q8: whatever the
// order; fp16/f32: in the fast order, or over K laid out by column for it).
bool runs_fast_kernel(const kv_layer_view& kv, attention_order order) {
  if (kv.dtype == kv_dtype::q8) return kv.k_by_column && kv_q8_supported(kv.head_dim);
  return (order == attention_order::fast || kv.k_by_column) && fast_kernel_fits(kv.head_dim);
}
}  // namespace

attention_split split_attention(const kv_layer_view& kv, attention_order order, int32_t n_ctx) {
  attention_split s;
  s.part_len = n_ctx;
  if (n_ctx <= k_min_part || kv.block_size <= 0 || !runs_fast_kernel(kv, order)) return s;
  const int32_t want = std::min<int32_t>(k_max_parts, (n_ctx + k_min_part - 1) / k_min_part);
  const int32_t bs = kv.block_size;
  s.part_len = ((n_ctx + want - 1) / want + bs - 1) / bs * bs;
  s.n_parts = static_cast<int>((n_ctx + s.part_len - 1) / s.part_len);
  return s;
}

void paged_attention_part(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                          int kv_head, int group, float scale, const attention_split& split, int part, float* out_part,
                          float* stats, float* scratch) {
  const int32_t p0 = part * split.part_len;
  const int32_t n = std::min(n_ctx, p0 + split.part_len) - p0;
  // A part starts on a block boundary, so it is the query over its own blocks.
  attend_fast(q, kv, block_table + p0 / kv.block_size, n, kv_head, group, scale, out_part, scratch, stats);
}

void merge_attention_parts(const float* parts, const float* stats, int n_parts, int group, int head_dim, float* out) {
  // Only split queries are merged, and only the fast kernel splits: its CPU has AVX2 at least.
  if (cpu_has_avx512()) detail::merge_parts_avx512(parts, stats, n_parts, group, head_dim, out);
  else detail::merge_parts_avx2(parts, stats, n_parts, group, head_dim, out);
}

void paged_attention_group(const float* q, const kv_layer_view& kv, const int32_t* block_table, int32_t n_ctx,
                           int kv_head, int group, float scale, float* out, float* scratch, attention_order order) {
  if (n_ctx <= 0) {  // nothing to attend to (a query always sees at least its own position)
    std::fill(out + static_cast<int64_t>(kv_head) * group * kv.head_dim,
              out + static_cast<int64_t>(kv_head + 1) * group * kv.head_dim, 0.0f);
    return;
  }
  if (runs_fast_kernel(kv, order))
    return attend_fast(q, kv, block_table, n_ctx, kv_head, group, scale,
                       out + static_cast<int64_t>(kv_head) * group * kv.head_dim, scratch, nullptr);
  // q8 has one kernel (the fast order's) whatever the order asked; without it, plain loops.
  if (kv.dtype == kv_dtype::q8) return attend_plain(q, kv, block_table, n_ctx, kv_head, group, scale, out, scratch);
  // K by column is read by the fast kernel (kv_k_by_column says when a view is laid out so).
  if (order == attention_order::fast || kv.k_by_column) {
    if (kv.k_by_column && kv.dtype == kv_dtype::f16) return attend_plain(q, kv, block_table, n_ctx, kv_head, group, scale, out, scratch);
    order = attention_order::single;  // other CPUs and head sizes: llama.cpp's decode order
  }
  if (kv.dtype == kv_dtype::f16)
    attend_t<f16_elems>(q, kv, block_table, n_ctx, kv_head, group, scale, out, scratch, order);
  else
    attend_t<f32_elems>(q, kv, block_table, n_ctx, kv_head, group, scale, out, scratch, order);
}

}  // namespace troupe::model
