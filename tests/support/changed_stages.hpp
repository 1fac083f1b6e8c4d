#pragma once
// The stages a reload replaces between two pipeline configs, decided as `troupe serve` decides
// them: from config/'s key-by-key diff (config_diff, stages_to_replace), for the tests that
// reconfigure a running pipeline.
#include <set>
#include <string>

#include "actors/supervisor/pipeline_config.hpp"
#include "config/config_diff.hpp"

namespace troupe::test {

inline std::set<std::string> changed_stages(const actors::pipeline_config& running, const actors::pipeline_config& next) {
  config::troupe_config a, b;
  a.pipeline = running;
  b.pipeline = next;
  return config::stages_to_replace(config::config_diff(a, b));
}

}  // namespace troupe::test
