// Fuzzes the safetensors reader (cache/embed/safetensors_reader.cpp) with arbitrary file images:
// an 8-byte header length, a JSON header, tensor bytes. Invariants: no crash; a refusal says
// why; every tensor's bytes lie inside the image (first and last bytes read, for
// AddressSanitizer), match its shape's element count times its dtype's size where the dtype is
// one the reader sizes, and can be found by name.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cache/embed/safetensors_reader.hpp"
#include "fuzz/fuzz_check.hpp"

using namespace troupe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = cache::safetensors_file::from_bytes(std::vector<uint8_t>(data, data + size));
  if (!f.ok()) {
    FUZZ_CHECK(!f.error().empty());
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const auto& t : f.value()->tensors()) {
    FUZZ_CHECK(f.value()->tensor(t.name) == &t);
    for (int64_t d : t.shape) FUZZ_CHECK(d >= 0);
    if (t.bytes > 0) sink = sink + t.data[0] + t.data[t.bytes - 1];
    model::ggml_type g;
    if (t.ggml_float_type(g)) {
      const size_t width = t.dtype == "F32" ? 4 : 2;
      FUZZ_CHECK(t.bytes == static_cast<size_t>(t.elements()) * width);
    }
  }
  return 0;
}
