#pragma once
// Model architectures by name (`general.architecture`): each kind says, in its own file
// (arch_llama.cpp, arch_qwen2.cpp), how its GGUF is laid out and which variant of the
// transformer block it uses; nothing else switches on the kind.
#include <string>
#include <vector>

namespace troupe::model {

enum class rope_style {
  normal,  // rotate adjacent pairs (x[2i], x[2i+1]) — GGUF llama weights are permuted for this
  neox,    // rotate halves (x[i], x[i + d/2])
};

struct architecture {
  std::string name;
  rope_style rope = rope_style::normal;
  bool qkv_bias = false;        // Q/K/V projections carry biases (qwen2)
};

// Returns nullptr when no architecture of that name is known.
const architecture* find_architecture(const std::string& name);
std::vector<std::string> architecture_names();

// One function per file; architecture.cpp lists them (static registration would be dropped by
// the linker from a static library).
architecture arch_llama();
architecture arch_qwen2();

}  // namespace troupe::model
