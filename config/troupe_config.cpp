#include "config/troupe_config.hpp"

namespace troupe::config {

std::vector<std::string> unread_settings(const troupe_config& c) {
  const troupe_config d;
  std::vector<std::string> out;
  if (c.pipeline.admission.max_prompt_tokens != d.pipeline.admission.max_prompt_tokens)
    out.push_back("admission.max_prompt_tokens: not enforced yet (admission checks the model's context only)");
  return out;
}

}  // namespace troupe::config
