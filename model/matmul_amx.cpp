// AMX detection, the tile layout's repacking and the plain C++ statement of the tile kernels
// (see matmul_amx.hpp). Built with the engine's ordinary flags: it runs on every CPU, and the
// code that executes tile instructions lives in matmul_amx_tiles.cpp alone.
#include "model/matmul_amx.hpp"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "model/quant.hpp"

namespace troupe::model {

namespace {

// Linux's arch_prctl codes (asm/prctl.h) and the XSAVE feature number of tile data: spelled out
// because the headers of older kernels lack them.
constexpr int k_arch_req_xcomp_perm = 0x1023;
constexpr int k_xfeature_xtiledata = 18;

uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  // XGETBV with ECX = 0 (only called once CPUID says OSXSAVE); asm needs no -mxsave.
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

amx_state detect() {
  amx_state s;
  if (const char* env = std::getenv("TROUPE_MATMUL_AMX"); env && std::strcmp(env, "0") == 0) {
    s.why = "turned off by TROUPE_MATMUL_AMX=0";
    return s;
  }
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) {
    s.why = "the CPU has no AMX-TILE / AMX-INT8 (CPUID leaf 7 EDX bits 24, 25)";
    return s;
  }
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) {
    s.why = "the OS has not enabled XSAVE (CPUID.1:ECX.OSXSAVE)";
    return s;
  }
  const uint64_t xcr0 = read_xcr0();
  if ((xcr0 & (3ull << 17)) != (3ull << 17)) {
    s.why = "the OS does not save tile state (XCR0 bits 17, 18 clear)";
    return s;
  }
  if (syscall(SYS_arch_prctl, k_arch_req_xcomp_perm, k_xfeature_xtiledata) != 0) {
    s.why = std::string("Linux refused tile data (arch_prctl ARCH_REQ_XCOMP_PERM: ") + std::strerror(errno) + ")";
    return s;
  }
  s.available = true;
  return s;
}

}  // namespace

const amx_state& amx_support() {
  static const amx_state s = detect();
  return s;
}

std::string amx_path_line() {
  const auto& s = amx_support();
  if (!s.available) return "AMX: not available (" + s.why + ")";
  return "AMX: amx-int8 tiles in the fast order for steps of " + std::to_string(detail::k_amx_min_tokens) +
         " tokens or more; single tokens on avx512vnni";
}

}  // namespace troupe::model

namespace troupe::model::detail {

size_t amx_group_bytes(int64_t n_in) { return static_cast<size_t>(amx_layout::block) * static_cast<size_t>(n_in / 32); }

void amx_pack_group(ggml_type type, const uint8_t* src, int64_t n_in, uint8_t* dst) {
  int src_block = 0;
  switch (type) {
    case ggml_type::q4_0: src_block = x16_layout::q4_0_block; break;
    case ggml_type::q4_1: src_block = x16_layout::q4_1_block; break;
    case ggml_type::q8_0: src_block = x16_layout::q8_0_block; break;
    case ggml_type::q4_k: src_block = x16_layout::q4_k_block; break;
    case ggml_type::q6_k: src_block = x16_layout::q6_k_block; break;
    default: return;
  }
  for (int64_t b = 0; b < n_in / 32; ++b, src += src_block, dst += amx_layout::block) {
    float* d = reinterpret_cast<float*>(dst + 512);
    float* m = d + 16;
    std::memset(dst, 0, amx_layout::block);
    const bool nibbles = type == ggml_type::q4_0 || type == ggml_type::q4_1 || type == ggml_type::q4_k;
    if (nibbles) {  // x16 byte 64k + 4r + j: element 4k + j in the low nibble, 16 + 4k + j in the high
      for (int k = 0; k < 4; ++k)
        for (int o = 0; o < 64; ++o) {
          dst[64 * k + o] = src[64 * k + o] & 0x0F;
          dst[64 * (k + 4) + o] = src[64 * k + o] >> 4;
        }
    } else {  // already 8 rows of 64 bytes, word r of row k holding row r's elements 4k..4k+3
      std::memcpy(dst, src, 512);
    }
    const int scales_at = nibbles ? 256 : 512;
    for (int r = 0; r < 16; ++r) {
      if (type == ggml_type::q4_k || type == ggml_type::q6_k) {  // f32 already
        std::memcpy(d + r, src + scales_at + 4 * r, 4);
        std::memcpy(m + r, src + scales_at + 64 + 4 * r, 4);
        continue;
      }
      uint16_t h;
      std::memcpy(&h, src + scales_at + 2 * r, 2);
      d[r] = fp16_to_fp32(h);
      if (type == ggml_type::q4_1) {
        std::memcpy(&h, src + scales_at + 32 + 2 * r, 2);
        m[r] = fp16_to_fp32(h);
      }
    }
  }
}

void tdpbsud_emulated(int32_t (&c)[16][16], const int8_t* a, int64_t lda, const uint8_t* b, int rows, int kbytes) {
  for (int mi = 0; mi < rows; ++mi)
    for (int n = 0; n < 16; ++n) {
      int32_t sum = c[mi][n];
      for (int k = 0; k < kbytes / 4; ++k)
        for (int i = 0; i < 4; ++i)
          sum += static_cast<int32_t>(a[mi * lda + 4 * k + i]) * static_cast<int32_t>(b[64 * k + 4 * n + i]);
      c[mi][n] = sum;
    }
}

namespace {

// Each block's integer product of up to 16 tokens (tile rows) x 16 weight rows (tile columns)
// with the tile instruction's arithmetic, then the x16 kernel's float steps in its order:
// acc = fma(float(s - offset * sum_x), d_w * d_x, acc), then acc = fma(m_w, s_x, acc) (or the
// second half's fma(float(s_hi), m_w * d_x, acc)).
template <ggml_type Type>
void emulated_kernel(const kernel_weights& w, const q8_acts& x, int64_t r0, int64_t r1, int64_t t0, int64_t t1,
                     float* y, int64_t y_stride) {
  constexpr amx_type_traits tr = *amx_traits(Type);
  for (int64_t g = r0 / 16; g * 16 < r1; ++g) {
    const int64_t lo = std::max<int64_t>(r0 - g * 16, 0), hi = std::min<int64_t>(r1 - g * 16, 16);
    for (int64_t t = t0; t < t1; t += 16) {
      const int n_t = static_cast<int>(std::min<int64_t>(16, t1 - t));
      float acc[16][16] = {};
      const uint8_t* blk = w.data + g * static_cast<int64_t>(w.row_stride);
      for (int64_t b = 0; b < x.nb; ++b, blk += amx_layout::block) {
        const float* d = reinterpret_cast<const float*>(blk + 512);
        const float* m = d + 16;
        const int8_t* a = x.qs + t * x.qs_stride + 32 * b;
        int32_t c0[16][16] = {}, c1[16][16] = {};
        if (tr.halves) {
          tdpbsud_emulated(c0, a, x.qs_stride, blk, n_t, 16);
          tdpbsud_emulated(c1, a + 16, x.qs_stride, blk + 256, n_t, 16);
        } else {
          tdpbsud_emulated(c0, a, x.qs_stride, blk, n_t, 32);
        }
        for (int j = 0; j < n_t; ++j) {
          const float dx = x.d[(t + j) * x.nb_pad + b];
          const int32_t* sum = x.sum16 + 2 * (t + j) * x.nb_pad + 2 * b;
          for (int r = 0; r < 16; ++r) {
            if (tr.halves) {
              acc[j][r] = std::fma(static_cast<float>(c0[j][r] - tr.offset * sum[0]), d[r] * dx, acc[j][r]);
              acc[j][r] = std::fma(static_cast<float>(c1[j][r] - tr.offset * sum[1]), m[r] * dx, acc[j][r]);
              continue;
            }
            acc[j][r] = std::fma(static_cast<float>(c0[j][r] - tr.offset * (sum[0] + sum[1])), d[r] * dx, acc[j][r]);
            if (tr.has_min) acc[j][r] = std::fma(m[r], x.s[(t + j) * x.nb_pad + b], acc[j][r]);
          }
        }
      }
      for (int j = 0; j < n_t; ++j)
        for (int64_t r = lo; r < hi; ++r) y[(t + j) * y_stride + g * 16 + r] = acc[j][r];
    }
  }
}

}  // namespace

const x16_kernels& amx_emulated_kernels() {
  static const x16_kernels k = {emulated_kernel<ggml_type::q4_0>, emulated_kernel<ggml_type::q4_1>,
                                emulated_kernel<ggml_type::q8_0>, emulated_kernel<ggml_type::q4_k>,
                                emulated_kernel<ggml_type::q6_k>};
  return k;
}

}  // namespace troupe::model::detail
