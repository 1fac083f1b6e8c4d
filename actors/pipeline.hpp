#pragma once
// The pipeline: a supervisor actor that spawns admission, cache, scheduler, executor and
// streamer from one plain config struct, hands each its peers, watches them and restarts one
// that fails (the executor with a fresh backend; the scheduler after failing what it had). The
// `pipeline` object starts and stops it from ordinary code and answers questions about it.
//
// Defaults live here, in the config structs of each actor (scheduler_config, admission_config,
// response_cache_config, streamer_config), each key documented where it is defined. A later issue reads
// them from TOML and swaps actors while serving; the policy is already a name looked up in the
// registry.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/fwd.hpp>

#include "actors/admission.hpp"
#include "actors/cache.hpp"
#include "actors/executor.hpp"
#include "actors/links.hpp"
#include "actors/scheduler.hpp"
#include "actors/streamer.hpp"
#include "actors/text_codec.hpp"
#include "model/backend.hpp"
#include "model/llama_model.hpp"

namespace troupe::actors {

struct pipeline_config {
  std::string model_name = "default";  // the name requests use (request_spec::model)
  scheduler_config scheduler;
  admission_config admission;          // model_name, n_ctx and n_vocab are filled in at start
  response_cache_config cache;
  streamer_config streamer;
  int64_t step_timeout_ms = 120000;    // one engine step; longer counts as an executor fault
  int64_t startup_timeout_ms = 120000; // building the backend
  int32_t max_restarts = 5;            // per actor within restart_window_ms; then it stays down
  int64_t restart_window_ms = 60000;
};

// A backend maker for a registered backend ("cpu", "cuda") over a loaded model.
backend_maker make_backend_maker(std::shared_ptr<model::llama_model> m, model::backend_options o,
                                 std::string backend = "cpu");

class pipeline {
 public:
  // Starts every actor and waits until the executor's backend is built. Errors name what
  // failed (an unknown policy lists the known ones; a backend error is passed on).
  static result<std::unique_ptr<pipeline>> start(caf::actor_system& sys, pipeline_config cfg, backend_maker make,
                                                 std::shared_ptr<const text_codec> codec);
  // The usual case: the CPU backend (or `backend`) over a loaded model, its own tokenizer.
  static result<std::unique_ptr<pipeline>> start(caf::actor_system& sys, pipeline_config cfg,
                                                 std::shared_ptr<model::llama_model> m, model::backend_options o,
                                                 std::string backend = "cpu");

  ~pipeline();
  pipeline(const pipeline&) = delete;
  pipeline& operator=(const pipeline&) = delete;

  // Stops every actor and waits for them. Open streams end with an error event.
  void stop();

  caf::actor_system& system() const { return sys_; }
  pipeline_links links() const { return cell_->get(); }
  std::shared_ptr<const links_cell> cell() const { return cell_; }
  pipeline_config config() const {
    std::lock_guard<std::mutex> lock(cfg_mu_);
    return cfg_;
  }
  const executor_info& executor() const { return info_; }
  const std::shared_ptr<const text_codec>& codec() const { return codec_; }

  // Blocking questions (for tests, benchmarks and the CLI; not for hot paths).
  result<scheduler_stats> get_scheduler_stats(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  result<admission_stats> get_admission_stats(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  result<streamer_stats> get_streamer_stats(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  result<cache_stats> get_cache_stats(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  // Hot reload: the actors whose settings differ in `next` are replaced while serving, their
  // state moving to the new actor (the scheduler's queues, sequences and block tables: no
  // stream loses or repeats a token; admission's requests in flight and its policy, which keeps
  // its state unless the policy or its options changed). Output filters change in place: the
  // streamer keeps running, streams opened afterwards get the new filters and running streams
  // keep theirs ("streamer" in the answer). Answers the names of the actors replaced or
  // reconfigured, or why nothing was (an unknown name, options a part refuses, a
  // reconfiguration already under way); on an error the running configuration stays. Keys that
  // need a restart (model, KV memory, prefix caching, the streamer's flow control) are not
  // looked at here. Blocks until done: a scheduler hands over between two steps.
  result<std::vector<std::string>> reconfigure(const pipeline_config& next,
                                               std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  pipeline(caf::actor_system& sys, pipeline_config cfg, std::shared_ptr<const text_codec> codec);

  caf::actor_system& sys_;
  mutable std::mutex cfg_mu_;
  pipeline_config cfg_;
  std::shared_ptr<const text_codec> codec_;
  std::shared_ptr<links_cell> cell_;
  caf::actor supervisor_;
  executor_info info_;
};

}  // namespace troupe::actors
