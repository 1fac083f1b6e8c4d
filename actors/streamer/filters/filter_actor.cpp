#include "actors/streamer/filters/filter_actor.hpp"

#include <algorithm>

namespace troupe::actors {

named_registry<filter_actor_factory>& filter_actor_registry() {
  static auto* r = new named_registry<filter_actor_factory>("filter actor");  // never destroyed: plugins hold on
  return *r;
}

std::vector<std::string> output_filter_names() {
  auto names = stream_filter_registry().names();
  for (auto& n : filter_actor_registry().names()) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

result<output_filters> output_filters::make(const std::vector<filter_spec>& specs) {
  output_filters out;
  std::vector<filter_spec> in_process;
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const std::string where = "streamer.filters[" + std::to_string(i) + "]: ";
    if (stream_filter_registry().contains(s.name)) {
      if (!out.actors.empty())
        return make_error(where + "stream filter '" + s.name + "' comes after filter actor '" + out.actors.back().name +
                          "': list the in-process filters first (filter actors run after them)");
      in_process.push_back(s);
      continue;
    }
    auto factory = filter_actor_registry().find(s.name);
    if (!factory) {
      std::string known;
      for (const auto& n : output_filter_names()) known += (known.empty() ? "" : ", ") + n;
      return make_error(where + "unknown stream filter '" + s.name + "' (known filters and filter actors: " +
                        (known.empty() ? std::string("none") : known) + ")");
    }
    auto spawner = factory.value()(s.options);
    if (!spawner) return make_error(where + spawner.error());
    if (!spawner.value()) return make_error(where + "filter actor '" + s.name + "' made nothing");
    out.actors.push_back(filter_actor_part{s.name, std::move(spawner.value())});
  }
  auto chain = filter_chain_maker::make(in_process);
  if (!chain) return make_error(chain.error());
  out.in_process = std::move(chain.value());
  return out;
}

}  // namespace troupe::actors
