#include "model/ggml_type.hpp"

namespace troupe::model {

namespace {
// Layouts follow the GGUF specification (ggml's block structs).
const type_traits k_traits[] = {
    /*0  f32 */ {"F32", 1, 4, true, true},
    /*1  f16 */ {"F16", 1, 2, true, true},
    /*2  q4_0*/ {"Q4_0", 32, 18, true, true},
    /*3  q4_1*/ {"Q4_1", 32, 20, true, true},
    /*4      */ {nullptr, 0, 0, false, false},
    /*5      */ {nullptr, 0, 0, false, false},
    /*6  q5_0*/ {"Q5_0", 32, 22, true, false},
    /*7  q5_1*/ {"Q5_1", 32, 24, true, false},
    /*8  q8_0*/ {"Q8_0", 32, 34, true, true},
    /*9  q8_1*/ {"Q8_1", 32, 36, false, false},
    /*10 q2_k*/ {"Q2_K", 256, 84, true, false},
    /*11 q3_k*/ {"Q3_K", 256, 110, true, false},
    /*12 q4_k*/ {"Q4_K", 256, 144, true, true},
    /*13 q5_k*/ {"Q5_K", 256, 176, true, false},
    /*14 q6_k*/ {"Q6_K", 256, 210, true, true},
    /*15 q8_k*/ {"Q8_K", 256, 292, false, false},
};
const type_traits k_bf16 = {"BF16", 1, 2, true, true};
}  // namespace

const type_traits* traits_of(uint32_t id) {
  if (id == 30) return &k_bf16;
  if (id < sizeof(k_traits) / sizeof(k_traits[0]) && k_traits[id].name) return &k_traits[id];
  return nullptr;
}

size_t row_bytes(ggml_type t, int64_t n) {
  const auto* tr = traits_of(t);
  return static_cast<size_t>(n / tr->block_size) * tr->block_bytes;
}

std::string type_name(uint32_t id) {
  const auto* tr = traits_of(id);
  return tr ? tr->name : "unknown type id " + std::to_string(id);
}

}  // namespace troupe::model
