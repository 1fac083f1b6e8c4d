// Llama family: SmolLM2, TinyLlama, Llama 2/3, Mistral. llama.cpp's converter permutes Q and K
// so that the adjacent-pair RoPE matches the original rotate-half formulation.
#include "model/architecture.hpp"

namespace troupe::model {
architecture arch_llama() { return architecture{"llama", rope_style::normal, false}; }
}  // namespace troupe::model
