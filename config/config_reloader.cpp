#include "config/config_reloader.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

namespace troupe::config {

config_reloader::config_reloader(troupe_config running, std::string path, std::string exe_path,
                                 std::vector<config_override> overrides)
    : active_(running), started_(std::move(running)), path_(std::move(path)), exe_path_(std::move(exe_path)),
      overrides_(std::move(overrides)) {}

reload_result config_reloader::reload(const apply_fn& apply) {
  std::lock_guard<std::mutex> serial(reload_mu_);
  auto refused = [&](const std::string& why) {
    reload_result r;
    r.error = "the config was not reloaded (the running one stays): " + why;
    r.version = version();
    return r;
  };
  if (path_.empty()) {  // started without a file: the default config, found again
    auto next = resolve_config(path_, exe_path_, overrides_);
    if (!next) return refused(next.error());
    return reload_from(next->config, apply);
  }
  auto text = read_config_text(path_);
  if (!text) return refused(text.error());
  // An empty file is a valid config (every key at its default), but as a reload it is far more
  // likely an editor's save caught half-way, and applying it would turn every hot key back to its
  // default (the response cache on, tenant limits gone): refused.
  if (std::all_of(text->begin(), text->end(), [](unsigned char c) { return std::isspace(c) != 0; }))
    return refused(path_ + " is empty (a save in progress?); write the whole file, then reload");
  auto next = parse_config(*text, path_, overrides_);
  if (!next) return refused(next.error());
  return reload_from(*next, apply);
}

reload_result config_reloader::reload_from(const troupe_config& next, const apply_fn& apply) {
  troupe_config before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before = active_;
  }
  reload_result r;
  for (auto& c : config_diff(before, next))
    if (c.reload == reload_kind::hot) r.applied.push_back(std::move(c));
  for (auto& c : config_diff(started_, next))
    if (c.reload == reload_kind::restart) r.restart_needed.push_back(std::move(c));
  if (!r.applied.empty()) {
    // Restart-only keys keep their running values in what is applied now: they are reported
    // (restart_needed), never applied half-way by a replaced actor.
    auto done = apply(with_restart_keys_of(started_, next), stages_to_replace(r.applied));
    if (!done) {
      r.error = "the config was not applied (the running one stays): " + done.error();
      r.applied.clear();
      r.version = version();
      return r;
    }
    r.replaced = std::move(done.value());
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!r.applied.empty()) ++version_;
  active_ = next;
  pending_ = r.restart_needed;
  r.ok = true;
  r.version = version_;
  return r;
}

int64_t config_reloader::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

troupe_config config_reloader::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

std::vector<config_change> config_reloader::pending_restart() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

}  // namespace troupe::config
