#pragma once
// The flags `troupe serve` had before it read a config file (--listen, --model, --threads, ...),
// as overrides of the keys they stand for. Only flags given on the command line are set here,
// so a flag left out never replaces what the file says.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config_loader.hpp"
#include "common/result.hpp"

namespace troupe::config {

struct serve_flags {
  std::optional<std::string> listen;          // HOST:PORT -> server.host, server.port
  std::optional<std::string> model;           // model.path
  std::optional<std::string> model_name;      // model.name
  std::optional<int64_t> threads;             // server.io_threads
  std::optional<int64_t> backend_threads;     // model.threads
  std::vector<std::string> api_keys;          // auth.api_keys (replaces the file's list); empty: not given
  std::optional<int64_t> kv_mb;               // kv.memory_mib
  std::optional<int64_t> max_seqs;            // scheduler.max_num_seqs
  std::optional<int64_t> max_body;            // server.max_body_bytes
  std::optional<int64_t> max_ws_message;      // server.max_ws_message_bytes
  std::optional<int64_t> ws_idle;             // server.ws_idle_timeout_s
  std::optional<int64_t> resume_window;       // server.resume_window_s
  bool no_cache = false;                      // cache.enabled = false
};

// The overrides, in the order above; an error for a malformed --listen.
result<std::vector<config_override>> to_overrides(const serve_flags& f);

}  // namespace troupe::config
