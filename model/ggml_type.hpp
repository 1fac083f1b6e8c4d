#pragma once
// Tensor element types as numbered by the GGUF format (ggml_type), with their block layout.
#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe::model {

enum class ggml_type : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  bf16 = 30,
};

struct type_traits {
  const char* name;
  int64_t block_size;    // elements per block
  size_t block_bytes;    // bytes per block
  bool supported;        // Troupe can load and compute with it
  // The matmul kernels compute with it directly. A supported type without them (Q5_0, Q5_1,
  // Q2_K, Q3_K, Q5_K) is dequantizable only: such matrices are multiplied as Q8_0 (packed from them,
  // or llama_model::prepare_matmul_weights' copies).
  bool matmul = false;
};

// Traits of a type id read from a file; nullptr when the id is unknown.
const type_traits* traits_of(uint32_t type_id);
inline const type_traits* traits_of(ggml_type t) { return traits_of(static_cast<uint32_t>(t)); }

// Bytes taken by `n` elements of `t` (n must be a multiple of the block size).
size_t row_bytes(ggml_type t, int64_t n);

std::string type_name(uint32_t type_id);

}  // namespace troupe::model
