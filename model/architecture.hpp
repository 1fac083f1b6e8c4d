#pragma once
// Model architectures by name (`general.architecture`): each kind says, in its own file
// (arch_llama.cpp, arch_qwen2.cpp), how its GGUF is laid out and which variant of the
// transformer block it uses; nothing else switches on the kind.
#include <string>

#include "common/named_registry.hpp"

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

// The architectures by name, holding every one below from its first use.
named_registry<architecture>& architecture_registry();

// One function per file; architecture_registry() lists them.
architecture arch_llama();
architecture arch_qwen2();

}  // namespace troupe::model
