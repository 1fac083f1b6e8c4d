#pragma once
// The pipeline: a supervisor actor that spawns admission, cache, scheduler, executor and
// streamer from one plain config struct, hands each its peers, watches them and restarts one
// that fails (the executor with a fresh backend; the scheduler after failing what it had). The
// `pipeline` object starts and stops it from ordinary code and answers questions about it.
//
// Its config (pipeline_config.hpp) is plain values; config/ reads it from TOML, and a reload
// swaps the stages it names while serving.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/fwd.hpp>

#include "actors/admission/admission.hpp"
#include "actors/response_cache/response_cache.hpp"
#include "actors/executor/executor.hpp"
#include "actors/links.hpp"
#include "actors/router/router.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "actors/streamer/streamer.hpp"
#include "actors/supervisor/pipeline_config.hpp"
#include "actors/text_codec.hpp"
#include "model/backend.hpp"
#include "model/llama_model.hpp"

namespace troupe::actors {

// A backend maker for a registered backend ("cpu", "cuda") over a loaded model.
backend_maker make_backend_maker(std::shared_ptr<model::llama_model> m, model::backend_options o,
                                 std::string backend = "cpu");

// The stages a reconfiguration can replace, by the names reconfigure() takes and answers.
inline const std::set<std::string>& reload_stages() {
  static const std::set<std::string> s = {"admission", "cache", "router", "scheduler", "streamer"};
  return s;
}

class pipeline {
 public:
  // Starts every actor and waits until the executor's backend is built. Errors name what
  // failed (an unknown policy lists the known ones; a backend error is passed on).
  // `upstream`: a worker's pipeline sends its outputs there (its door to the front's router,
  // see actors/router/replica_door.hpp) and has no router of its own.
  static result<std::unique_ptr<pipeline>> start(caf::actor_system& sys, pipeline_config cfg, backend_maker make,
                                                 std::shared_ptr<const text_codec> codec, caf::actor upstream = {});
  // The usual case: the CPU backend (or `backend`) over a loaded model, its own tokenizer.
  static result<std::unique_ptr<pipeline>> start(caf::actor_system& sys, pipeline_config cfg,
                                                 std::shared_ptr<model::llama_model> m, model::backend_options o,
                                                 std::string backend = "cpu", caf::actor upstream = {});

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
  result<router_stats> get_router_stats(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  result<admission_stats> get_admission_stats(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  result<streamer_stats> get_streamer_stats(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;
  result<response_cache_stats> get_cache_stats(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

  // Hot reload: the stages named in `stages` (a subset of reload_stages) are replaced while
  // serving with their settings from `next`, their state moving to the new actor (the
  // scheduler's queues, sequences and block tables: no stream loses or repeats a token;
  // admission's requests in flight and its policy, which keeps its state unless the policy or
  // its options changed). Output filters change in place ("streamer"): the streamer keeps
  // running, streams opened afterwards get the new filters and running streams keep theirs.
  // Which stages changed is the caller's to say: config/config_diff decides it from its diff of
  // two configs (an empty set replaces nothing). `next` is checked whole first. Answers the
  // names of the actors replaced or reconfigured, or why nothing was (an unknown stage or name,
  // options a part refuses, a reconfiguration already under way); on an error the running
  // configuration stays. Keys that need a restart (model, KV memory, prefix caching, the
  // streamer's flow control) are not applied here. Blocks until done: a scheduler hands over
  // between two steps.
  result<std::vector<std::string>> reconfigure(const pipeline_config& next, const std::set<std::string>& stages,
                                               std::chrono::milliseconds timeout = std::chrono::seconds(30));

 private:
  pipeline(caf::actor_system& sys, pipeline_config cfg, std::shared_ptr<const text_codec> codec);

  caf::actor_system& sys_;
  mutable std::mutex cfg_mu_;
  pipeline_config cfg_;
  std::shared_ptr<const text_codec> codec_;
  std::shared_ptr<links_cell> cell_;
  caf::actor supervisor_;
  caf::actor upstream_;  // a worker's door (not ours to stop)
  executor_info info_;
};

}  // namespace troupe::actors
