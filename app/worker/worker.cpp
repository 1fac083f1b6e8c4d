#include "app/worker/worker.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <set>
#include <thread>

#include "actors/router/replica_door.hpp"
#include "actors/runtime.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "app/serve/cluster.hpp"
#include "config/config_reloader.hpp"
#include "model/llama_model.hpp"

namespace troupe::app {

namespace {

std::string default_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":" + std::to_string(::getpid());
}

std::string model_name_of(const config::troupe_config& c) {
  if (!c.model.name.empty()) return c.model.name;
  std::string f = c.model.path.substr(c.model.path.find_last_of('/') + 1);
  if (f.size() > 5 && f.compare(f.size() - 5, 5, ".gguf") == 0) f.resize(f.size() - 5);
  return f;
}

actors::door_status status_of(caf::actor_system& sys, const actors::door_actor& door) {
  actors::door_status out;
  caf::scoped_actor self{sys};
  self->request(door, std::chrono::seconds(2), actors::stats_atom::value)
      .receive([&](actors::door_status& s) { out = std::move(s); }, [](caf::error&) {});
  return out;
}

// What the worker's pipeline runs of a config: the front admits, caches and streams, so here only
// the scheduler and the executor work (the other stages idle) and the cache is off.
actors::pipeline_config replica_pipeline(actors::pipeline_config cfg, const std::string& model) {
  cfg.model_name = model;
  cfg.cache.enabled = false;
  cfg.cache.exact.enabled = false;
  cfg.cache.semantic.enabled = false;
  return cfg;
}

// SIGHUP: the worker's own config read again, its scheduler replaced while serving where its
// keys changed (the only stage that works here). Logged, as the front logs its reloads.
void reload(config::config_reloader& reloader, actors::pipeline& p, const std::string& model) {
  auto r = reloader.reload([&](const config::troupe_config& next, const std::set<std::string>& stages) {
    std::set<std::string> here;
    if (stages.count("scheduler")) here.insert("scheduler");
    return p.reconfigure(replica_pipeline(next.pipeline, model), here);
  });
  if (!r.ok) {
    spdlog::error("troupe worker: {}", r.error);
    return;
  }
  std::string keys;
  for (const auto& c : r.applied) keys += (keys.empty() ? "" : ", ") + c.key;
  spdlog::info("troupe worker: SIGHUP: config reloaded: version {}; applied: {}; replaced: {} actor(s)", r.version,
               keys.empty() ? "nothing" : keys, r.replaced.size());
  for (const auto& c : r.restart_needed)
    spdlog::warn("troupe worker: config key {} changed ({} -> {}) but needs a restart", c.key, c.old_value, c.new_value);
}

}  // namespace

int run_worker(const worker_options& o) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto front = parse_host_port(o.join, "--join");
  if (!front) {
    std::fprintf(stderr, "troupe worker: %s\n", front.error().c_str());
    return 2;
  }
  const auto& conf = o.config;
  std::printf("troupe worker: loading %s ...\n", conf.model.path.c_str());
  std::fflush(stdout);
  auto m = model::llama_model::load(conf.model.path);
  if (!m) {
    std::fprintf(stderr, "troupe worker: cannot load %s: %s\n", conf.model.path.c_str(), m.error().c_str());
    return 1;
  }
  if (auto ok = check_cluster(conf.cluster); !ok) {
    std::fprintf(stderr, "troupe worker: %s\n", ok.error().c_str());
    return 2;
  }
  actors::runtime rt(cluster_runtime(conf.cluster, conf.pipeline.router.dead_after_ms));
  auto& sys = rt.system();

  actors::door_options d;
  d.name = o.name.empty() ? default_name() : o.name;
  d.model = model_name_of(conf);
  d.n_vocab = m.value()->params().n_vocab;
  d.block_size = conf.backend.block_size;
  d.secret = conf.pipeline.router.secret;
  // The front refuses a worker that would compute differently from the cluster (docs/cluster.md).
  d.numerics = numerics_of(conf, *m.value());
  auto door = actors::spawn_replica_door(sys, d);

  // A replica, its outputs going up through the door.
  auto p = actors::pipeline::start(sys, replica_pipeline(conf.pipeline, d.model), m.value(), conf.backend,
                                   conf.model.backend, caf::actor_cast<caf::actor>(door));
  if (!p) {
    std::fprintf(stderr, "troupe worker: cannot start the replica: %s\n", p.error().c_str());
    caf::anon_send_exit(door, caf::exit_reason::user_shutdown);
    return 1;
  }
  std::printf("troupe worker: replica ready (%s); joining %s\n", d.name.c_str(), o.join.c_str());
  std::fflush(stdout);
  config::config_reloader reloader(conf, o.config_path, config::self_executable(), o.overrides);

  int code = 0;
  bool draining = false, announced = false;
  auto drain_deadline = std::chrono::steady_clock::time_point::max();
  auto next_try = std::chrono::steady_clock::now();
  int failures = 0;
  for (;;) {
    timespec ts{0, 100 * 1000 * 1000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGHUP && !draining) reload(reloader, *p.value(), d.model);
    if (sig == SIGINT || sig == SIGTERM) {
      if (draining) break;  // a second signal: leave now
      draining = true;
      drain_deadline = std::chrono::steady_clock::now() + conf.server.shutdown_grace;
      caf::anon_send(door, actors::drain_atom::value);
      std::printf("troupe worker: draining: finishing what runs, taking nothing new (signal again to leave now)\n");
      std::fflush(stdout);
    }
    const auto st = status_of(sys, door);
    if (!st.refused.empty()) {
      std::fprintf(stderr, "troupe worker: the front refused this worker: %s\n", st.refused.c_str());
      code = 2;
      break;
    }
    if (draining && (st.in_flight == 0 || std::chrono::steady_clock::now() > drain_deadline)) break;
    if (st.joined && !announced) {
      announced = true;
      std::printf("troupe worker: joined %s as replica %llu\n", o.join.c_str(),
                  static_cast<unsigned long long>(st.replica_id));
      std::fflush(stdout);
    }
    if (!st.joined) announced = false;
    if (!st.connected && !draining && std::chrono::steady_clock::now() >= next_try) {
      auto router = connect_router(sys, front.value(), conf.cluster.tls());
      if (router) {
        failures = 0;
        caf::anon_send(door, actors::connect_atom::value, std::move(router.value()));
      } else {
        // A front that is up but speaks otherwise (its HTTP port, TLS on one side only, another
        // CA) fails the same way as one that is down: the hint says what to check.
        if (failures++ % 20 == 0)
          spdlog::warn("troupe worker: cannot reach the front at {}: {} (retrying; if the front is up, check that "
                       "--join names its cluster.listen, not its HTTP port, and that both sides set cluster.tls_* "
                       "with certificates of one CA, or neither does)",
                       o.join, router.error());
        next_try = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      }
    }
  }
  std::printf("troupe worker: leaving\n");
  std::fflush(stdout);
  p.value()->stop();
  caf::anon_send_exit(door, caf::exit_reason::user_shutdown);
  return code;
}

}  // namespace troupe::app
