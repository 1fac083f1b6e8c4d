#include "config/serve_flags.hpp"

#include "config/detail/toml_schema.hpp"

namespace troupe::config {

result<std::vector<config_override>> to_overrides(const serve_flags& f) {
  std::vector<config_override> out;
  auto text = [&](const char* flag, const char* key, const std::optional<std::string>& v) {
    if (v) out.push_back({key, detail::quote(*v), std::string(flag) + " " + *v});
  };
  auto number = [&](const char* flag, const char* key, const std::optional<int64_t>& v) {
    if (v) out.push_back({key, std::to_string(*v), std::string(flag) + " " + std::to_string(*v)});
  };
  if (f.listen) {
    const std::string& l = *f.listen;
    const auto colon = l.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == l.size())
      return make_error("--listen wants HOST:PORT, got '" + l + "'");
    std::string host = l.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    const std::string port = l.substr(colon + 1);
    if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5)
      return make_error("--listen: bad port in '" + l + "'");
    out.push_back({"server.host", detail::quote(host), "--listen " + l});
    out.push_back({"server.port", port, "--listen " + l});  // the range is checked with the file's
  }
  text("--model", "model.path", f.model);
  text("--model-name", "model.name", f.model_name);
  number("--threads", "server.io_threads", f.threads);
  number("--backend-threads", "model.threads", f.backend_threads);
  if (!f.api_keys.empty()) {
    std::string v = "[";
    for (size_t i = 0; i < f.api_keys.size(); ++i) v += (i ? ", " : "") + std::string("{ key = ") + detail::quote(f.api_keys[i]) + " }";
    out.push_back({"auth.api_keys", v + "]", "--api-key"});
  }
  number("--kv-mb", "kv.memory_mib", f.kv_mb);
  number("--max-seqs", "scheduler.max_num_seqs", f.max_seqs);
  number("--max-body", "server.max_body_bytes", f.max_body);
  number("--max-ws-message", "server.max_ws_message_bytes", f.max_ws_message);
  number("--ws-idle", "server.ws_idle_timeout_s", f.ws_idle);
  number("--resume-window", "server.resume_window_s", f.resume_window);
  if (f.no_cache) out.push_back({"cache.enabled", "false", "--no-cache"});
  return out;
}

}  // namespace troupe::config
