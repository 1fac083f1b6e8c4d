#include "model/matmul.hpp"

#include <cpuid.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "model/detail/matmul_kernels.hpp"
#include "model/detail/quant_blocks.hpp"
#include "model/matmul_amx.hpp"
#include "model/quant.hpp"
#include "model/weight_conversion.hpp"

namespace troupe::model {

namespace detail {

namespace {

// Below this many multiply-adds a second thread costs more in hand-off than it saves
// (a 576x192 Q4_1 decode matmul is ~110k and still gains from two threads).
constexpr int64_t k_min_parallel_macs = 32 * 1024;
// Token chunk: keep one chunk of quantized activations (per thread's pass over its rows)
// well inside a 1 MiB L2, so the rows' weights and the chunk both stay cached.
constexpr int64_t k_act_chunk_bytes = 128 * 1024;
// Activations of at least this many tokens are quantized by all pool threads.
constexpr int64_t k_parallel_quantize_tokens = 8;
// With a prologue (a norm to compute before quantizing), from this many tokens.
constexpr int64_t k_parallel_prologue_tokens = 4;
// Row chunks per pool thread: 2 balances the load and lets a running thread take over the share
// of one the OS has not scheduled, for one extra atomic claim per chunk.
constexpr int64_t k_chunks_per_thread = 2;

// F16C by CPUID (leaf 1, ECX bit 29): clang before 15 (the fuzz build's) knows no "f16c" in
// __builtin_cpu_supports. Asked once: every matmul checks its ISA (isa_supported), and under a
// hypervisor CPUID is a VM exit, measured at ~7 us here (AMD EPYC VM) — 76% of a 576x192 decode
// matmul's time and ~1 ms of a SmolLM2 decode step when it was asked on every call.
bool cpu_has_f16c() {
  static const bool has = [] {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  }();
  return has;
}

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  return has;
}

bool cpu_has_avx512vnni() {
  static const bool has = cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

// A 64-byte aligned, grow-only buffer. One per thread that calls matmul (thread_local), so the
// hot path allocates only the first time a larger batch shows up.
class scratch_buffer {
 public:
  uint8_t* get(size_t bytes) {
    if (bytes + 64 > storage_.size()) storage_.resize(bytes + 64);
    auto addr = reinterpret_cast<uintptr_t>(storage_.data());
    return storage_.data() + ((64 - (addr & 63)) & 63);
  }

 private:
  std::vector<uint8_t> storage_;
};

scratch_buffer& act_scratch() {
  thread_local scratch_buffer buf;
  return buf;
}

scratch_buffer& row_scratch() {
  thread_local scratch_buffer buf;
  return buf;
}

// ---- the scalar path: dequantize each weight row once, float dot with every token ----------

void scalar_kernel(ggml_type type, const kernel_weights& w, const float* x, int64_t r0,
                   int64_t r1, int64_t t0, int64_t t1, float* y, int64_t y_stride) {
  auto* row = reinterpret_cast<float*>(row_scratch().get(sizeof(float) * static_cast<size_t>(w.n_in)));
  for (int64_t r = r0; r < r1; ++r) {
    dequantize_row(type, w.data + r * w.row_stride, row, w.n_in);
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = x + t * w.n_in;
      float sum = 0.0f;
      for (int64_t i = 0; i < w.n_in; ++i) sum += row[i] * xt[i];
      y[t * y_stride + r] = sum;
    }
  }
}

const isa_kernels* kernels_for(isa_kind isa) {
  switch (isa) {
    case isa_kind::avx512vnni: return &avx512vnni_kernels();
    case isa_kind::avx2: return &avx2_kernels();
    default: return nullptr;
  }
}

// The block-type kernel of a table (isa_kernels, or x16_kernels for the fast order).
template <class Kernels>
q8_kernel_fn q8_kernel_for(const Kernels& k, ggml_type type) {
  switch (type) {
    case ggml_type::q4_0: return k.q4_0;
    case ggml_type::q4_1: return k.q4_1;
    case ggml_type::q8_0: return k.q8_0;
    case ggml_type::q4_k: return k.q4_k;
    case ggml_type::q6_k: return k.q6_k;
    default: return nullptr;
  }
}

float_kernel_fn float_kernel_for(const isa_kernels& k, ggml_type type) {
  switch (type) {
    case ggml_type::f32: return k.f32;
    case ggml_type::f16: return k.f16;
    case ggml_type::bf16: return k.bf16;
    default: return nullptr;
  }
}

int x16_block_bytes(ggml_type type) {
  switch (type) {
    case ggml_type::q4_0: return x16_layout::q4_0_block;
    case ggml_type::q4_1: return x16_layout::q4_1_block;
    case ggml_type::q8_0: return x16_layout::q8_0_block;
    case ggml_type::q4_k: return x16_layout::q4_k_block;
    case ggml_type::q6_k: return x16_layout::q6_k_block;
    default: return 0;
  }
}

// Sub-block b (of 32) of a Q4_K row as Q4_1-style nibbles (element l low, l + 16 high), its
// scale d * sc and its min -dmin * m.
void q4_k_sub_block(const uint8_t* row, int64_t b, uint8_t (&qs)[16], float& d, float& m) {
  const auto* blk = reinterpret_cast<const block_q4_k*>(row) + b / 8;
  const int j = static_cast<int>(b % 8);
  uint8_t sc = 0, mn = 0;
  q4_k_scale_min(blk->scales, j, &sc, &mn);
  d = fp16_to_fp32(blk->d) * static_cast<float>(sc);
  m = -(fp16_to_fp32(blk->dmin) * static_cast<float>(mn));
  const uint8_t* chunk = blk->qs + 32 * (j / 2);
  auto q = [&](int e) { return static_cast<uint8_t>(j % 2 == 0 ? chunk[e] & 0x0F : chunk[e] >> 4); };
  for (int l = 0; l < 16; ++l) qs[l] = static_cast<uint8_t>(q(l) | (q(l + 16) << 4));
}

// The type whose layout a matrix is packed in: its own, or Q8_0 for a type the kernels lack
// (Q5_0, Q5_1, Q2_K, Q3_K, Q5_K), whose rows are converted as they are packed (the conversion
// model/weight_conversion.hpp makes, so the packed bytes equal those of the Q8_0 copy).
ggml_type packed_type(ggml_type t) {
  const auto* tr = traits_of(t);
  return tr && tr->supported && !tr->matmul ? ggml_type::q8_0 : t;
}

size_t packed_group_bytes(const weight_view& w) {
  return static_cast<size_t>(x16_block_bytes(packed_type(w.type))) * static_cast<size_t>(w.n_in / qk32);
}

void pack_group_as_is(const weight_view& w, int64_t g, uint8_t* dst);

// Block b of rows [16g, 16g + 16) into the fast layout (see x16_layout); rows past n_out are zero.
void pack_group(const weight_view& w, int64_t g, uint8_t* dst) {
  if (packed_type(w.type) == w.type) return pack_group_as_is(w, g, dst);
  // The group's rows converted to Q8_0 first, then packed as Q8_0 rows.
  weight_view q8 = w;
  q8.type = ggml_type::q8_0;
  q8.row_stride = row_bytes(ggml_type::q8_0, w.n_in);
  q8.n_out = std::min<int64_t>(x16_layout::rows, w.n_out - g * x16_layout::rows);
  std::vector<uint8_t> rows(q8.row_stride * static_cast<size_t>(q8.n_out));
  for (int64_t i = 0; i < q8.n_out; ++i)
    convert_row_to_q8_0(w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(g * x16_layout::rows + i) * w.row_stride,
                        rows.data() + static_cast<size_t>(i) * q8.row_stride, w.n_in);
  q8.data = rows.data();
  pack_group_as_is(q8, 0, dst);
}

void pack_group_as_is(const weight_view& w, int64_t g, uint8_t* dst) {
  const int64_t nb = w.n_in / qk32;
  const int bb = x16_block_bytes(w.type);
  const int qs_bytes = w.type == ggml_type::q8_0 ? 512 : 256;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* out = dst + b * bb;
    std::memset(out, 0, static_cast<size_t>(bb));
    for (int i = 0; i < x16_layout::rows && g * 16 + i < w.n_out; ++i) {
      const uint8_t* row = static_cast<const uint8_t*>(w.data) + (g * 16 + i) * w.row_stride;
      if (w.type == ggml_type::q6_k) {  // block b: elements 32 (b % 8) .. + 31 of super-block b / 8
        const auto* blk = reinterpret_cast<const block_q6_k*>(row) + b / 8;
        uint8_t q[256];
        q6_k_values(blk, q);
        const int e0 = 32 * static_cast<int>(b % 8);
        for (int k = 0; k < 8; ++k) std::memcpy(out + 64 * k + 4 * i, q + e0 + 4 * k, 4);
        const float d = fp16_to_fp32(blk->d);
        const float lo = d * static_cast<float>(blk->scales[e0 / 16]), hi = d * static_cast<float>(blk->scales[e0 / 16 + 1]);
        std::memcpy(out + 512 + 4 * i, &lo, 4);
        std::memcpy(out + 576 + 4 * i, &hi, 4);
        continue;
      }
      if (w.type == ggml_type::q4_k) {
        uint8_t q[16];
        float d, m;
        q4_k_sub_block(row, b, q, d, m);
        for (int k = 0; k < 4; ++k) std::memcpy(out + 64 * k + 4 * i, q + 4 * k, 4);
        std::memcpy(out + 256 + 4 * i, &d, 4);
        std::memcpy(out + 320 + 4 * i, &m, 4);
        continue;
      }
      const uint8_t* qs = nullptr;
      const uint16_t* scales = nullptr;  // d, then (Q4_1) m
      int n_scales = 1;
      if (w.type == ggml_type::q4_0) {
        const auto* blk = reinterpret_cast<const block_q4_0*>(row) + b;
        qs = blk->qs;
        scales = &blk->d;
      } else if (w.type == ggml_type::q4_1) {
        const auto* blk = reinterpret_cast<const block_q4_1*>(row) + b;
        qs = blk->qs;
        scales = &blk->d;
        n_scales = 2;
      } else {
        const auto* blk = reinterpret_cast<const block_q8_0*>(row) + b;
        qs = reinterpret_cast<const uint8_t*>(blk->qs);
        scales = &blk->d;
      }
      for (int k = 0; k < qs_bytes / 64; ++k)
        for (int j = 0; j < 4; ++j) {
          const uint8_t v = qs[4 * k + j];
          out[64 * k + 4 * i + j] = w.type == ggml_type::q8_0 ? static_cast<uint8_t>(v ^ 0x80) : v;
        }
      for (int c = 0; c < n_scales; ++c) std::memcpy(out + qs_bytes + 32 * c + 2 * i, scales + c, 2);
    }
  }
}

}  // namespace

bool isa_supported(isa_kind isa) {
  switch (isa) {
    case isa_kind::scalar: return true;
    case isa_kind::avx2: return cpu_has_avx2();
    case isa_kind::avx512vnni: return cpu_has_avx512vnni();
  }
  return false;
}

isa_kind best_isa() {
  static const isa_kind best = [] {
    // TROUPE_MATMUL_ISA (see matmul.hpp) can only lower the choice, never pick an ISA the CPU
    // lacks.
    if (const char* env = std::getenv("TROUPE_MATMUL_ISA")) {
      for (auto isa : {isa_kind::scalar, isa_kind::avx2, isa_kind::avx512vnni}) {
        if (std::strcmp(env, isa_name(isa)) == 0 && isa_supported(isa)) return isa;
      }
    }
    return cpu_has_avx512vnni() ? isa_kind::avx512vnni : cpu_has_avx2() ? isa_kind::avx2 : isa_kind::scalar;
  }();
  return best;
}

const char* isa_name(isa_kind isa) {
  switch (isa) {
    case isa_kind::avx512vnni: return "avx512vnni";
    case isa_kind::avx2: return "avx2";
    case isa_kind::scalar: return "scalar";
  }
  return "scalar";
}

void quantize_acts_scalar(const float* x, int64_t n, int8_t* qs, float* d, float* s, int32_t* sum16) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, qs += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float db = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int half[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      qs[j] = static_cast<int8_t>(std::lrintf(x[j] * id));  // half to even, like cvtps2dq
      half[j / 16] += qs[j];
    }
    const int sum = half[0] + half[1];
    // Scales rounded through fp16 as ggml's block_q8_0 / block_q8_1 store them: the products
    // then match llama.cpp's bit for bit, which keeps greedy decoding on the same path.
    d[b] = round_fp16(db);
    sum16[2 * b] = half[0];
    sum16[2 * b + 1] = half[1];
    s[b] = round_fp16(db * static_cast<float>(sum));
  }
}

void matmul_with_isa(isa_kind isa, const weight_view& w, const float* x, int64_t n_tok, float* y,
                     thread_pool& pool) {
  matmul_multi_with_isa(isa, &w, &y, 1, x, n_tok, pool);
}

void matmul_multi_with_isa(isa_kind isa, const weight_view* ws, float* const* ys, int n_mat,
                           const float* x, int64_t n_tok, thread_pool& pool, const row_epilogue* then,
                           const row_prologue* first) {
  if (n_tok <= 0) return;
  if (then && !then->fn) then = nullptr;
  const std::function<void(int64_t)>* prologue = first && first->fn ? &first->fn : nullptr;
  auto prologue_rows = [prologue](int64_t t0, int64_t t1) {
    if (prologue)
      for (int64_t t = t0; t < t1; ++t) (*prologue)(t);
  };
  if (n_mat <= 0) {  // nothing reads x, but its rows are still ready on return
    prologue_rows(0, n_tok);
    return;
  }
  if (!isa_supported(isa)) isa = isa_kind::scalar;
  const isa_kernels* kernels = kernels_for(isa);
  const int64_t n_in = ws[0].n_in;

  // One job per matrix: its kernel and where its rows start in the concatenation of all rows.
  struct job {
    kernel_weights kw;
    ggml_type type;
    int64_t n_out;
    int64_t first_row;
    q8_kernel_fn qk;
    float_kernel_fn fk;
    float* y;
  };
  const x16_kernels* x16 = isa == isa_kind::avx512vnni ? &avx512vnni_x16_kernels()
                           : isa == isa_kind::avx2     ? &avx2_x16_kernels()
                                                       : nullptr;
  constexpr int k_max_jobs = 8;
  job jobs[k_max_jobs];
  if (n_mat > k_max_jobs) {  // not a hot-path shape: split and recurse, then the epilogue on all rows
    matmul_multi_with_isa(isa, ws, ys, k_max_jobs, x, n_tok, pool, nullptr, first);
    matmul_multi_with_isa(isa, ws + k_max_jobs, ys + k_max_jobs, n_mat - k_max_jobs, x, n_tok, pool);
    if (then) {
      int64_t rows = 0;
      for (int i = 0; i < n_mat; ++i) rows = then->shared_rows ? std::max(rows, ws[i].n_out) : rows + ws[i].n_out;
      then->fn(0, rows);
    }
    return;
  }
  const bool shared = then && then->shared_rows;
  int64_t total_rows = 0;
  bool need_acts = false;
  for (int i = 0; i < n_mat; ++i) {
    const weight_view& w = ws[i];
    job& j = jobs[i];
    j = job{kernel_weights{static_cast<const uint8_t*>(w.data), w.row_stride, w.n_in}, w.type, w.n_out,
            shared ? 0 : total_rows, nullptr, nullptr, ys[i]};
    if (kernels) {
      j.fk = float_kernel_for(*kernels, w.type);
      j.qk = j.fk ? nullptr : q8_kernel_for(*kernels, w.type);
    }
    if (w.packed && x16) {
      j.kw = kernel_weights{static_cast<const uint8_t*>(w.packed), packed_group_bytes(w), w.n_in};
      j.qk = q8_kernel_for(*x16, packed_type(w.type));
      if (n_tok >= k_amx_min_tokens && amx_usable()) {  // same results, tile multiplies (matmul_amx.hpp)
        j.kw = kernel_weights{j.kw.data + packed_group_bytes(w) * static_cast<size_t>((w.n_out + 15) / 16),
                              amx_group_bytes(w.n_in), w.n_in};
        j.qk = q8_kernel_for(amx_kernels(), packed_type(w.type));
      }
    }
    need_acts |= j.qk != nullptr;
    total_rows = shared ? std::max(total_rows, w.n_out) : total_rows + w.n_out;
  }
  if (total_rows == 0) {
    prologue_rows(0, n_tok);
    return;
  }
  const int nth = total_rows * n_in * n_tok >= k_min_parallel_macs ? pool.size() : 1;

  // Quantize the activations once for all rows of all matrices: [qs of every token][d][s], each
  // token's row right after the prologue wrote it.
  q8_acts acts{};
  int64_t chunk = n_tok;
  if (!need_acts && prologue) {
    if (n_tok >= k_parallel_prologue_tokens && nth > 1) {
      pool.parallel_for(n_tok, [&prologue_rows](int64_t t0, int64_t t1) { prologue_rows(t0, t1); });
    } else {
      prologue_rows(0, n_tok);
    }
  }
  if (need_acts) {
    acts.nb = n_in / 32;
    acts.nb_pad = (acts.nb + 1) / 2 * 2;
    acts.qs_stride = acts.nb_pad * 32;
    const size_t qs_bytes = static_cast<size_t>(n_tok * acts.qs_stride);
    const size_t f_count = static_cast<size_t>(n_tok * acts.nb_pad);
    uint8_t* buf = act_scratch().get(qs_bytes + 4 * sizeof(float) * f_count);
    auto* qs = reinterpret_cast<int8_t*>(buf);
    auto* d = reinterpret_cast<float*>(buf + qs_bytes);
    auto* s = d + f_count;
    auto* sums = reinterpret_cast<int32_t*>(s + f_count);
    acts.qs = qs;
    acts.d = d;
    acts.s = s;
    acts.sum16 = sums;
    const quantize_acts_fn quantize = kernels->quantize_acts;
    auto quantize_tokens = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        if (prologue) (*prologue)(t);
        int8_t* q = qs + t * acts.qs_stride;
        float* dt = d + t * acts.nb_pad;
        float* st = s + t * acts.nb_pad;
        int32_t* sum = sums + 2 * t * acts.nb_pad;
        quantize(x + t * n_in, acts.nb * 32, q, dt, st, sum);
        for (int64_t b = acts.nb; b < acts.nb_pad; ++b) {
          std::memset(q + b * 32, 0, 32);
          dt[b] = 0.0f;
          st[b] = 0.0f;
          sum[2 * b] = sum[2 * b + 1] = 0;
        }
      }
    };
    if (n_tok >= (prologue ? k_parallel_prologue_tokens : k_parallel_quantize_tokens) && nth > 1) {
      // Wrapped so the std::function holds one pointer (stored inline, no allocation).
      pool.parallel_for(n_tok, [&quantize_tokens](int64_t t0, int64_t t1) { quantize_tokens(t0, t1); });
    } else {
      quantize_tokens(0, n_tok);
    }
    chunk = std::max<int64_t>(4, k_act_chunk_bytes / (acts.qs_stride + 8 * acts.nb_pad) / 4 * 4);
  }

  // Rows [r0, r1) of the concatenation (shared_rows: of every matrix): each matrix's overlap,
  // computed by its kernel, then the epilogue.
  auto compute = [&](int64_t r0, int64_t r1) {
    for (int i = 0; i < n_mat; ++i) {
      const job& j = jobs[i];
      const int64_t a = std::max(r0, j.first_row) - j.first_row;
      const int64_t b = std::min(r1, j.first_row + j.n_out) - j.first_row;
      if (a >= b) continue;
      if (j.qk) {
        for (int64_t t0 = 0; t0 < n_tok; t0 += chunk) {
          j.qk(j.kw, acts, a, b, t0, std::min(n_tok, t0 + chunk), j.y, j.n_out);
        }
      } else if (j.fk) {
        j.fk(j.kw, x, n_in, a, b, 0, n_tok, j.y, j.n_out);
      } else {  // scalar ISA, or a type without a fast path: stay correct
        scalar_kernel(j.type, j.kw, x, a, b, 0, n_tok, j.y, j.n_out);
      }
    }
    if (then) then->fn(r0, r1);
  };
  if (nth == 1) {
    compute(0, total_rows);
    return;
  }
  // Chunks of rows handed out dynamically (see thread_pool::run_chunks), a multiple of 16 rows
  // each so that no two threads write the same 64-byte line of an output row, and of the
  // epilogue's alignment (whole heads: with an odd number of them one thread gets a head more).
  const int64_t target = k_chunks_per_thread * nth;
  const int64_t align = then ? std::lcm<int64_t>(16, std::max<int64_t>(1, then->align)) : 16;
  struct split {
    int64_t rows_per_chunk, total_rows;
    decltype(compute)* fn;
  } sp{((total_rows + target - 1) / target + align - 1) / align * align, total_rows, &compute};
  const int64_t n_chunks = (total_rows + sp.rows_per_chunk - 1) / sp.rows_per_chunk;
  // Captures one pointer, so the std::function stores it inline (no allocation).
  pool.run_chunks(n_chunks, [&sp](int64_t c) {
    (*sp.fn)(c * sp.rows_per_chunk, std::min(sp.total_rows, (c + 1) * sp.rows_per_chunk));
  });
}

}  // namespace detail

bool detail::amx_usable() {
  // The tile kernels apply the scales with AVX-512, and only the fast order's layout has a tile form.
  static const bool usable = [] {
    if (!amx_support().available) {
      std::fprintf(stderr, "troupe: matmul: the fast order runs on %s, not AMX: %s\n",
                   isa_name(best_isa()), amx_support().why.c_str());
      return false;
    }
    if (best_isa() != isa_kind::avx512vnni) {
      std::fprintf(stderr, "troupe: matmul: AMX not used: the fast order's AVX-512 VNNI path is off (matmul path %s)\n",
                   isa_name(best_isa()));
      return false;
    }
    return true;
  }();
  return usable;
}

bool fast_order_available() { return detail::best_isa() != detail::isa_kind::scalar; }

size_t packed_bytes(const weight_view& w) {
  if (!fast_order_available()) return 0;
  if (detail::x16_block_bytes(detail::packed_type(w.type)) == 0 || w.n_in % detail::qk32 != 0 || w.n_out <= 0 ||
      !w.data)
    return 0;
  const auto groups = static_cast<size_t>((w.n_out + 15) / 16);
  // With AMX the tile layout follows the x16 one in the same allocation (see amx_usable).
  const size_t amx_bytes = detail::amx_usable() ? detail::amx_group_bytes(w.n_in) * groups : 0;
  return (detail::packed_group_bytes(w) * groups + amx_bytes + 63) / 64 * 64;
}

void pack_weights_into(const weight_view& w, uint8_t* mem) {
  const int64_t groups = (w.n_out + 15) / 16;
  const size_t group_bytes = detail::packed_group_bytes(w);
  const size_t total = group_bytes * static_cast<size_t>(groups);
  for (int64_t g = 0; g < groups; ++g) detail::pack_group(w, g, mem + static_cast<size_t>(g) * group_bytes);
  if (!detail::amx_usable()) return;
  for (int64_t g = 0; g < groups; ++g)
    detail::amx_pack_group(detail::packed_type(w.type), mem + static_cast<size_t>(g) * group_bytes, w.n_in,
                           mem + total + static_cast<size_t>(g) * detail::amx_group_bytes(w.n_in));
}

packed_weights pack_weights(const weight_view& w) {
  const size_t bytes = packed_bytes(w);
  if (bytes == 0) return {};
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  if (!mem) return {};
  pack_weights_into(w, mem);
  return packed_weights{std::shared_ptr<uint8_t>(mem, [](uint8_t* p) { std::free(p); })};
}

const char* matmul_order_name(matmul_order o) { return o == matmul_order::fast ? "fast" : "llama.cpp"; }

std::optional<matmul_order> parse_matmul_order(std::string_view name) {
  if (name == "fast") return matmul_order::fast;
  if (name == "llama.cpp") return matmul_order::llama_cpp;
  return std::nullopt;
}

void matmul(const weight_view& w, const float* x, int64_t n_tok, float* y, thread_pool& pool,
            const row_epilogue* then, const row_prologue* first) {
  detail::matmul_multi_with_isa(detail::best_isa(), &w, &y, 1, x, n_tok, pool, then, first);
}

void matmul_multi(const weight_view* ws, float* const* ys, int n, const float* x, int64_t n_tok,
                  thread_pool& pool, const row_epilogue* then, const row_prologue* first) {
  detail::matmul_multi_with_isa(detail::best_isa(), ws, ys, n, x, n_tok, pool, then, first);
}

void matmul_reference(const weight_view& w, const float* x, int64_t n_tok, float* y) {
  std::vector<float> row(static_cast<size_t>(w.n_in));
  for (int64_t o = 0; o < w.n_out; ++o) {
    dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + o * w.row_stride, row.data(), w.n_in);
    for (int64_t t = 0; t < n_tok; ++t) {
      const float* xt = x + t * w.n_in;
      double sum = 0.0;
      for (int64_t i = 0; i < w.n_in; ++i) sum += static_cast<double>(row[i]) * xt[i];
      y[t * w.n_out + o] = static_cast<float>(sum);
    }
  }
}

const char* matmul_isa() { return detail::isa_name(detail::best_isa()); }

}  // namespace troupe::model
