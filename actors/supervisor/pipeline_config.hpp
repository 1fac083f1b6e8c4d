#pragma once
// What the pipeline is built from: one plain struct holding each stage's config struct and the
// supervisor's own numbers. Apart from pipeline.hpp (no actor system, no pipeline class), so that
// config/ can describe these fields directly; each stage's config comes from its interface header.
//
// Defaults live here, in the config structs of each actor (scheduler_config, admission_config,
// response_cache_config, streamer_config), each key documented where it is defined. config/'s
// schema reads them from TOML (config/reference.toml documents the keys).
#include <cstdint>
#include <string>

#include "actors/admission/policy.hpp"
#include "actors/response_cache/response_cache.hpp"
#include "actors/router/router.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "actors/streamer/streamer.hpp"
#include "actors/text_codec.hpp"

namespace troupe::actors {

struct pipeline_config {
  std::string model_name = "default";  // the name requests use (request_spec::model)
  scheduler_config scheduler;
  admission_config admission;          // model_name, n_ctx and n_vocab are filled in at start
  response_cache_config cache;
  streamer_config streamer;
  router_config router;
  text_codec_options text;             // how chat prompts are tokenized (pipeline::start's codec)
  int64_t step_timeout_ms = 120000;    // one engine step; longer counts as an executor fault
  int64_t startup_timeout_ms = 120000; // building the backend
  int32_t max_restarts = 5;            // per actor within restart_window_ms; then it stays down
  int64_t restart_window_ms = 60000;
};

}  // namespace troupe::actors
