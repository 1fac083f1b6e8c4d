#include "model/architecture.hpp"

namespace troupe::model {

named_registry<architecture>& architecture_registry() {
  static auto* r = [] {
    auto* reg = new named_registry<architecture>("architecture");  // never destroyed, like every registry
    for (auto a : {arch_llama(), arch_qwen2()}) reg->add(a.name, a);
    return reg;
  }();
  return *r;
}

}  // namespace troupe::model
