#pragma once
// Matrices of a type the matmul kernels do not compute with (Q5_0, Q5_1, Q2_K, Q3_K, Q5_K:
// type_traits::matmul is false) converted to Q8_0, which they do: each row dequantized and
// quantized again with quantize_row. The fast order's packing converts rows this way as it packs
// them (model/matmul.cpp); backends that read rows as stored get whole Q8_0 copies
// (llama_model::prepare_matmul_weights). Q8_0 spends 8 bits per value on a grid that is at least
// 8 times finer than the original's 5-bit (or smaller) one, so the conversion adds an error far
// below the type's own step (tests/model/weight_conversion_test.cpp measures it). The results are
// deterministic and batch-invariant like every other type's, but not bit-identical to llama.cpp,
// which multiplies these types in their own formats.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.hpp"
#include "model/ggml_type.hpp"
#include "model/matmul.hpp"

namespace troupe::model {

class gguf_file;

// One row of n elements of `type` as Q8_0 blocks (dst holds row_bytes(q8_0, n); n a multiple of 32).
void convert_row_to_q8_0(ggml_type type, const void* src, void* dst, int64_t n);

// What convert_for_matmul did: the memory holding the converted matrices (empty when none
// needed it), its size, and the original types it converted (each once, in first-seen order).
struct converted_weights {
  std::shared_ptr<uint8_t> memory;
  size_t bytes = 0;
  std::vector<ggml_type> types;
  size_t source_bytes = 0;  // the originals' bytes, for messages
};

// Re-points every view in `ws` whose type has no matmul kernels at a Q8_0 copy in memory the
// result owns (2 MiB pages, in the order given; a view listed twice is converted once), and
// tells `file` it may release the originals' pages, except for those of `keep` (the token
// embeddings, which are still read a row at a time in their own type). Rows are converted on
// all cores. An error when the memory cannot be had.
result<converted_weights> convert_for_matmul(const std::vector<weight_view*>& ws, const gguf_file& file,
                                             const void* keep);

// "Q5_K weights converted to Q8_0 for the matmul kernels (+31 MB)": the line the loader logs.
std::string describe(const converted_weights& c);

}  // namespace troupe::model
