#include "actors/streamer/filters/stream_filter.hpp"

namespace troupe::actors {

named_registry<stream_filter_factory>& stream_filter_registry() {
  static auto* r = new named_registry<stream_filter_factory>("stream filter", {filters::add_redact, filters::add_stop_on});
  return *r;
}

result<std::shared_ptr<const filter_chain_maker>> filter_chain_maker::make(
    const std::vector<filter_spec>& specs, const named_registry<stream_filter_factory>& registry) {
  auto out = std::make_shared<filter_chain_maker>();
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    auto factory = registry.find(s.name);
    if (!factory) return make_error("streamer.filters[" + std::to_string(i) + "]: " + factory.error());
    auto maker = factory.value()(s.options);
    if (!maker) return make_error("streamer.filters[" + std::to_string(i) + "]: " + maker.error());
    if (!maker.value()) return make_error("streamer.filters[" + std::to_string(i) + "]: stream filter '" + s.name +
                                          "' made nothing");
    out->makers_.push_back(std::move(maker.value()));
    out->names_.push_back(s.name);
  }
  return std::shared_ptr<const filter_chain_maker>(std::move(out));
}

std::vector<std::unique_ptr<stream_filter>> filter_chain_maker::make_chain(const filter_context& ctx) const {
  std::vector<std::unique_ptr<stream_filter>> chain;
  chain.reserve(makers_.size());
  for (const auto& m : makers_)
    if (auto f = m(ctx)) chain.push_back(std::move(f));
  return chain;
}

filter_decision run_filters(std::vector<std::unique_ptr<stream_filter>>& chain, std::string& text,
                            bool end_of_stream) {
  filter_decision out;
  for (auto& f : chain) {
    auto d = f->on_text(text);
    if (d.end) {
      if (!out.end) out = std::move(d);
      continue;  // it has said its last word: no flush
    }
    if (out.end || end_of_stream) {
      std::string held;
      auto e = f->on_end(held);
      text += held;
      if (e.end && !out.end) out = std::move(e);
    }
  }
  return out;
}

}  // namespace troupe::actors
