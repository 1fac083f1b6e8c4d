// Shows how to open a GGUF model with Troupe's engine library and read its metadata and tensors.
// Usage: example_inspect_gguf FILE
#include <cstdio>

#include "model/gguf_reader.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE.gguf\n", argv[0]);
    return 2;
  }
  auto f = troupe::model::gguf_file::open(argv[1]);
  if (!f) {
    std::fprintf(stderr, "error: %s\n", f.error().c_str());
    return 1;
  }
  auto& file = *f.value();
  std::printf("GGUF v%u, %zu keys, %zu tensors\n", file.version(), file.metadata().size(), file.tensors().size());
  for (const auto& [k, v] : file.metadata()) {
    if (v.type == troupe::model::gguf_value_type::string)
      std::printf("  %s = %.60s\n", k.c_str(), v.as_string().c_str());
    else if (v.type == troupe::model::gguf_value_type::array)
      std::printf("  %s = [%zu items]\n", k.c_str(), v.as_array().size());
    else
      std::printf("  %s = %g\n", k.c_str(), v.as_double());
  }
  for (const auto& t : file.tensors()) {
    std::printf("  %-32s %-5s", t.name.c_str(), troupe::model::type_name(static_cast<uint32_t>(t.type)).c_str());
    for (auto d : t.dims) std::printf(" %lld", static_cast<long long>(d));
    std::printf("\n");
  }
  return 0;
}
