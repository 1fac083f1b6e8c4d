// Qwen2: Llama-like blocks with biases on the Q/K/V projections and NeoX-style (rotate-half) RoPE.
#include "model/architecture.hpp"

namespace troupe::model {
architecture arch_qwen2() { return architecture{"qwen2", rope_style::neox, true}; }
}  // namespace troupe::model
