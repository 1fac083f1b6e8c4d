#pragma once
// The fast order on Intel AMX (Xeon 4th gen and later): the same arithmetic as the AVX-512 VNNI
// kernels over the x16 layout (matmul_x16_avx512.cpp), with each block's integer dot product of
// 16 tokens x 16 weight rows done by one tile multiply (TDPBSUD: signed activations x unsigned
// weights into int32) instead of 16 x 8 VPDPBUSD. The integer block sums are the same and the
// block scales are applied in the same float order, so the result equals the fast order bit for
// bit (tests/model/matmul_amx_test.cpp checks a plain C++ statement of the tile instruction's
// arithmetic against it). Used for steps of k_amx_min_tokens tokens or more, only where
// amx_support() says the CPU, the OS and Linux's permission allow it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "model/detail/matmul_kernels.hpp"
#include "model/ggml_type.hpp"

namespace troupe::model {

struct amx_state {
  bool available = false;
  std::string why;  // when not available: what is missing
};

// Detects AMX once per process: CPUID.(7,0):EDX AMX-TILE (bit 24) and AMX-INT8 (bit 25), the
// OS's XSAVE enabling tile state (XCR0 bits 17 XTILECFG and 18 XTILEDATA, read with XGETBV), and
// Linux granting this process tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)).
// TROUPE_MATMUL_AMX=0 turns it off (to measure the VNNI path on an AMX machine). Executes no
// AMX instruction.
const amx_state& amx_support();

// What `troupe info` and `troupe bench engine` print: "AMX: amx-int8 tiles for steps of N tokens
// or more" or "AMX: not available (why)".
std::string amx_path_line();

}  // namespace troupe::model

namespace troupe::model::detail {

// Steps with fewer tokens keep the AVX-512 VNNI kernel. Measured on a Xeon (model 167, 2 threads,
// troupe_matmul_bench BM_decode_step_matmuls, the 30 layers' matmuls of one step): AMX against
// VNNI 1.7x slower at 2 tokens (the tile layout holds twice the bytes: nibbles unpacked), equal
// at 16, 1.08x faster at 64 and 1.12x at 256. The tiles do 8x VNNI's multiplies per cycle, but
// each block's product must leave them to be scaled (per-block scales, kept bit for bit), and
// that scaling is what both paths spend their time on.
constexpr int64_t k_amx_min_tokens = 32;

// The tile layout of one block of 32 inputs for 16 weight rows, made from the x16 layout (see
// amx_pack_group): bytes [0, 512) are the B operand of TDPBSUD (8 rows of 64 bytes, row k holding
// weight row r's elements 4k..4k+3 at bytes 4r..4r+3, unsigned: Q4 nibbles unpacked, Q8_0 plus
// 128, Q6_K 0..63), then 16 f32 scales d, then 16 f32 m (the min for Q4_1 / Q4_K, the second
// half's scale for Q6_K, zero otherwise). Each fp16 scale widens to f32 exactly.
struct amx_layout {
  static constexpr int rows = 16;
  static constexpr int block = 512 + 64 + 64;
};

// The arithmetic that differs by type: value = (q - offset) * d (+ m) or, with halves, elements
// 0-15 scaled by d and 16-31 by m.
struct amx_type_traits {
  int offset = 0;
  bool has_min = false;
  bool halves = false;
};
// Nothing for a type without a fast-order kernel (see pack_weights).
constexpr std::optional<amx_type_traits> amx_traits(ggml_type type) {
  switch (type) {
    case ggml_type::q4_0: return amx_type_traits{8, false, false};
    case ggml_type::q4_1: return amx_type_traits{0, true, false};
    case ggml_type::q8_0: return amx_type_traits{128, false, false};
    case ggml_type::q4_k: return amx_type_traits{0, true, false};
    case ggml_type::q6_k: return amx_type_traits{32, false, true};
    default: return std::nullopt;
  }
}

// Bytes of one group of 16 rows (n_in / 32 blocks).
size_t amx_group_bytes(int64_t n_in);
// Group `x16_group` (x16 layout, n_in / 32 blocks of `type`) into the tile layout.
void amx_pack_group(ggml_type type, const uint8_t* x16_group, int64_t n_in, uint8_t* dst);

// TDPBSUD as the ISA states it, in plain C++: for m < rows, n < 16,
// C[m][n] += sum over k < kbytes / 4, i < 4 of int8(A[m][4k + i]) * uint8(B[k][4n + i]), rows of A
// lda bytes apart, B's rows 64 bytes apart. The emulated kernels below are built on it.
void tdpbsud_emulated(int32_t (&c)[16][16], const int8_t* a, int64_t lda, const uint8_t* b, int rows, int kbytes);

// Kernels over the tile layout (kernel_weights.data: the packed matrix; row_stride:
// amx_group_bytes): amx_emulated_kernels() in plain C++ (any CPU, for the tests), amx_kernels()
// with the tile instructions (matmul_amx_tiles.cpp; only where amx_support().available).
const x16_kernels& amx_emulated_kernels();
const x16_kernels& amx_kernels();

// Whether the fast order multiplies with tiles here: amx_support() and the AVX-512 VNNI path in
// use. Decided once (matmul.cpp); the first call logs why not, in one line, when not.
bool amx_usable();

}  // namespace troupe::model::detail
