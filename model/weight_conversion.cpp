#include "model/weight_conversion.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "model/gguf_reader.hpp"
#include "model/huge_pages.hpp"
#include "model/quant.hpp"
#include "model/thread_pool.hpp"

namespace troupe::model {

namespace {

bool needs_conversion(const weight_view& w) {
  const auto* tr = traits_of(w.type);
  return tr && tr->supported && !tr->matmul;
}

// Each converted matrix starts on a cache line: rows are read from the first byte on.
size_t aligned_q8_0_bytes(const weight_view& w) {
  const size_t n = static_cast<size_t>(w.n_out) * row_bytes(ggml_type::q8_0, w.n_in);
  return (n + 63) / 64 * 64;
}

}  // namespace

void convert_row_to_q8_0(ggml_type type, const void* src, void* dst, int64_t n) {
  // One super-block at a time (every block size divides 256), so no heap allocation is needed.
  constexpr int64_t chunk = 256;
  float buf[chunk];
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const size_t in_step = row_bytes(type, chunk), out_step = row_bytes(ggml_type::q8_0, chunk);
  for (int64_t i = 0; i < n; i += chunk, in += in_step, out += out_step) {
    const int64_t len = std::min(chunk, n - i);
    dequantize_row(type, in, buf, len);
    quantize_row(ggml_type::q8_0, buf, out, len);
  }
}

result<converted_weights> convert_for_matmul(const std::vector<weight_view*>& ws, const gguf_file& file,
                                             const void* keep) {
  converted_weights c;
  std::vector<weight_view*> todo;
  for (weight_view* w : ws) {
    if (!needs_conversion(*w) || std::find(todo.begin(), todo.end(), w) != todo.end()) continue;
    todo.push_back(w);
    c.bytes += aligned_q8_0_bytes(*w);
    c.source_bytes += static_cast<size_t>(w->n_out) * w->row_stride;
    if (std::find(c.types.begin(), c.types.end(), w->type) == c.types.end()) c.types.push_back(w->type);
  }
  if (todo.empty()) return c;
  c.memory = alloc_huge_pages(c.bytes);
  if (!c.memory)
    return make_error("cannot allocate " + std::to_string(c.bytes >> 20) + " MiB to convert " +
                      type_name(static_cast<uint32_t>(c.types[0])) + " weights to Q8_0");

  // Rows in chunks of 64 over all matrices, on every core: a 7B model has ~7e9 values to convert.
  struct span {
    const weight_view* w;
    uint8_t* dst;
  };
  std::vector<span> spans;
  std::vector<int64_t> first_chunk;  // of each span, and the total at the end
  constexpr int64_t rows_per_chunk = 64;
  uint8_t* at = c.memory.get();
  int64_t n_chunks = 0;
  for (const weight_view* w : todo) {
    spans.push_back({w, at});
    first_chunk.push_back(n_chunks);
    n_chunks += (w->n_out + rows_per_chunk - 1) / rows_per_chunk;
    at += aligned_q8_0_bytes(*w);
  }
  first_chunk.push_back(n_chunks);
  thread_pool pool(0);
  pool.run_chunks(n_chunks, [&](int64_t chunk) {
    const auto s = static_cast<size_t>(std::upper_bound(first_chunk.begin(), first_chunk.end(), chunk) -
                                       first_chunk.begin() - 1);
    const weight_view& w = *spans[s].w;
    const size_t out_stride = row_bytes(ggml_type::q8_0, w.n_in);
    const int64_t r0 = (chunk - first_chunk[s]) * rows_per_chunk;
    const int64_t r1 = std::min(w.n_out, r0 + rows_per_chunk);
    for (int64_t r = r0; r < r1; ++r)
      convert_row_to_q8_0(w.type, static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_stride,
                          spans[s].dst + static_cast<size_t>(r) * out_stride, w.n_in);
  });

  for (size_t i = 0; i < todo.size(); ++i) {
    weight_view& w = *todo[i];
    // Not read again, but for the token embeddings (looked up a row at a time in their own type).
    if (w.data != keep) file.release_pages(w.data, static_cast<size_t>(w.n_out) * w.row_stride);
    w.type = ggml_type::q8_0;
    w.data = spans[i].dst;
    w.row_stride = row_bytes(ggml_type::q8_0, w.n_in);
    w.packed = nullptr;
  }
  return c;
}

std::string describe(const converted_weights& c) {
  std::string types;
  for (ggml_type t : c.types) types += (types.empty() ? "" : ", ") + type_name(static_cast<uint32_t>(t));
  char mb[32];
  std::snprintf(mb, sizeof mb, "%.0f", static_cast<double>(c.bytes) / 1e6);
  return types + " weights converted to Q8_0 for the matmul kernels (+" + mb + " MB)";
}

}  // namespace troupe::model
