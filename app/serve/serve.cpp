// The CAF side of `troupe serve`: the runtime, the pipeline and the in-process client behind
// net::inference. No Beast here (see CAF-0.17-NOTES: Beast + CAF in one TU is slow to build).
#include "app/serve/serve.hpp"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/client.hpp"
#include "app/serve/cluster.hpp"
#include "app/serve/fresh_figures.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "cache/embed/embedder.hpp"
#include "cache/embed/minilm_embedder.hpp"
#include "model/llama_model.hpp"
#include "net/json_writer.hpp"
#include "net/metrics.hpp"

namespace troupe::app {

namespace {

std::string stem(const std::string& path) {
  auto slash = path.find_last_of('/');
  std::string f = slash == std::string::npos ? path : path.substr(slash + 1);
  if (f.size() > 5 && f.compare(f.size() - 5, 5, ".gguf") == 0) f.resize(f.size() - 5);
  return f;
}

// One thread running jobs in order, started with the first: work that must not run on an I/O
// thread. A bounded queue: past `max_queued` waiting jobs, post() refuses.
class job_thread {
 public:
  explicit job_thread(size_t max_queued) : max_queued_(max_queued) {}
  ~job_thread() { stop(); }

  bool post(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || jobs_.size() >= max_queued_) return false;
    jobs_.push_back(std::move(job));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    cv_.notify_one();
    return true;
  }

  // Finishes the running job; those still waiting are dropped (their callers are going away).
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      jobs_.clear();
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::thread thread_;
  bool stopping_ = false;
};

net::api_error loading_error() {
  return net::from_pipeline_error({0, "loading", "the model is still loading; retry shortly", 5000});
}

net::api_error busy_error(const char* what) {
  net::api_error e = net::from_pipeline_error({0, actors::errc::overloaded, std::string("too many ") + what +
                                                   " requests are waiting; retry shortly", 1000});
  return e;
}

// net::inference over a pipeline that is started in the background.
class pipeline_inference : public net::inference {
 public:
  explicit pipeline_inference(std::string name) : name_(std::move(name)) {}

  // The embedder /v1/embeddings uses: the response cache's (by its config name and options),
  // an instance of its own, loaded on the first request.
  void set_embedder(std::string name, cache::embedder_options opts) {
    embedder_name_ = std::move(name);
    embedder_opts_ = std::move(opts);
  }

  bool ready() const override { return ready_.load(); }
  std::string model_name() const override { return name_; }
  std::vector<std::string> listed_models() const override {
    std::vector<std::string> names{name_};
    if (auto e = listed_embedding_model(); e != name_) names.push_back(e);
    return names;
  }

  actors::request_handle submit(actors::request_spec spec, actors::event_handler on_event,
                                actors::ack_mode acks) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!client_) {
      lock.unlock();
      on_event(actors::error_event{0, "loading", "the model is still loading; retry shortly", 5000});
      return {};
    }
    return client_->submit(std::move(spec), std::move(on_event), acks);
  }

  std::string pipeline_metrics() const override {
    std::string extra = extra_metrics_ ? extra_metrics_() : std::string();
    std::lock_guard<std::mutex> lock(mu_);
    return gauges_ + router_gauges_ + extra;
  }

  void admin(const std::string& action, std::function<void(admin_reply)> done) override {
    if (!admin_) return net::inference::admin(action, std::move(done));
    admin_(action, std::move(done));
  }

  void set_admin(std::function<void(const std::string&, std::function<void(admin_reply)>)> a,
                 std::function<std::string()> extra_metrics) {
    admin_ = std::move(a);
    extra_metrics_ = std::move(extra_metrics);
  }

  // Blocks while the pipeline swaps actors (a scheduler hands over between two steps).
  result<std::vector<std::string>> reconfigure(const actors::pipeline_config& next, const std::set<std::string>& stages) {
    actors::pipeline* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      p = pipeline_.get();
    }
    if (!p) return make_error("the model is still loading; retry when /health says ok");
    // The replica's numerics are not keys of a config file: they go with the model, which a
    // reload does not change.
    auto with_numerics = next;
    with_numerics.router.numerics = p->config().router.numerics;
    return p->reconfigure(with_numerics, stages);
  }

  // The replicas on other hosts that are part of the cluster now (not dead): a reload here does
  // not reach them (each worker reloads its own config on SIGHUP).
  std::vector<std::string> workers() {
    std::vector<std::string> out;
    actors::pipeline* p = current_pipeline();
    if (!p) return out;
    if (auto rs = p->get_router_stats(std::chrono::seconds(2)))
      for (const auto& r : rs->replicas)
        if (r.id != 0 && r.state != "dead") out.push_back(r.name);
    return out;
  }

  std::string token_piece(int32_t id) const override {
    auto codec = codec_now();
    return codec ? codec->token_piece(id) : std::string();
  }
  int32_t vocab_size() const override {
    auto codec = codec_now();
    return codec ? codec->n_vocab() : 0;
  }
  structured::tool_format tool_format() const override {
    auto codec = codec_now();
    return codec ? codec->tool_format() : structured::tool_format::hermes;
  }

  std::string health_details() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return router_health_ + (router_health_.empty() || health_.empty() ? "" : ",") + health_;
  }

  std::string unavailable() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return unavailable_;
  }

  // Tokenizing and detokenizing run on their own thread (a MiB of text takes a while), so that a
  // long embedding batch does not hold them up.
  void tokenize(net::tokenize_query q, std::function<void(reply<net::tokenized>)> done) override {
    auto codec = codec_now();
    if (!codec) return done({loading_error(), {}});
    auto job = [codec, q = std::move(q), done]() {
      auto ids = codec->encode_text(q.content, q.add_special, q.parse_special);
      if (!ids) return done({net::bad_request("'content' cannot be tokenized: " + ids.error(), "content"), {}});
      net::tokenized t;
      t.tokens = std::move(ids.value());
      if (q.with_pieces) {
        t.pieces.reserve(t.tokens.size());
        for (int32_t id : t.tokens) t.pieces.push_back(codec->token_piece(id));
      }
      done({std::nullopt, std::move(t)});
    };
    if (!text_jobs_.post(job)) done({busy_error("tokenize"), {}});
  }

  void detokenize(std::vector<int32_t> tokens, std::function<void(reply<std::string>)> done) override {
    auto codec = codec_now();
    if (!codec) return done({loading_error(), {}});
    const int32_t n_vocab = codec->n_vocab();
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] >= n_vocab) {
        const std::string at = "tokens[" + std::to_string(i) + "]";
        return done({net::bad_request("'" + at + "' = " + std::to_string(tokens[i]) + " is outside the vocabulary (0.." +
                                          std::to_string(n_vocab - 1) + ")",
                                      at),
                     {}});
      }
    }
    auto job = [codec, tokens = std::move(tokens), done]() {
      // The streamer's decoder: the text a generation of these tokens would have shown.
      auto d = codec->decoder();
      std::string text;
      for (int32_t id : tokens) text += d->push(id);
      text += d->flush();
      done({std::nullopt, std::move(text)});
    };
    if (!text_jobs_.post(job)) done({busy_error("detokenize"), {}});
  }

  void embed(net::embedding_query q, std::function<void(reply<net::embedding_result>)> done) override {
    // The embedder's own thread: its model runs there, one text after the other (MiniLM
    // serialises its calls anyway), the whole list as one job.
    auto job = [this, q = std::move(q), done]() { done(embed_now(q)); };
    if (!embed_jobs_.post(job)) done({busy_error("embedding"), {}});
  }

  // Joins the worker threads; a request still waiting there gets no answer (its server is going).
  void stop_jobs() {
    jobs_stopping_ = true;  // a long embedding list ends at its next text (embed_now)
    text_jobs_.stop();
    embed_jobs_.stop();
  }

  void set(std::unique_ptr<actors::pipeline> p) {
    // The router's figures before ready(): /health must not say ok until it knows whether a
    // replica can serve (a front with cluster.local_replica = false has none yet).
    auto rs = p->get_router_stats(std::chrono::seconds(2));
    std::lock_guard<std::mutex> lock(mu_);
    if (rs) take_router_stats(*rs);
    pipeline_ = std::move(p);
    client_ = std::make_unique<actors::client>(*pipeline_);
    ready_ = true;
  }

  actors::pipeline* current_pipeline() {
    std::lock_guard<std::mutex> lock(mu_);
    return pipeline_.get();
  }

  // The requests of /metrics and /health held for a fresh round (fresh_figures.hpp).
  void fresh_figures(std::function<void()> then) override { fresh_.hold(std::move(then)); }
  app::fresh_figures& freshness() { return fresh_; }

  // Blocking stats calls, kept off the I/O threads: a poller refreshes the gauges.
  void refresh_gauges() {
    actors::pipeline* p = current_pipeline();
    if (!p) return;
    auto st = p->get_scheduler_stats(std::chrono::seconds(2));
    if (!st) return;
    // After a burst, hand the heap's freed pages back to the system once nothing runs: the
    // allocator keeps them otherwise, and the server's memory would stay at its peak.
    // (After the round's requests are answered: trim_heap_if_idle.)
    if (st->waiting > 0 || st->running > 0) {
      busy_since_trim_ = true;
    } else if (busy_since_trim_) {
      busy_since_trim_ = false;
      trim_wanted_ = true;
    }
    std::string g;
    auto gauge = [&](const char* name, const char* help, int64_t v) {
      g += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " +
           std::to_string(v) + "\n";
    };
    gauge("troupe_waiting_sequences", "Sequences waiting to be scheduled.", st->waiting);
    gauge("troupe_running_sequences", "Sequences holding KV memory.", st->running);
    gauge("troupe_max_num_seqs", "Batch limit in force (the adaptive policy moves it).", st->max_num_seqs);
    gauge("troupe_paused_sequences", "Running sequences paused because their reader fell behind (flow control).", st->paused);
    gauge("troupe_kv_blocks_used", "KV blocks referenced by a sequence.", st->kv_blocks_used);
    gauge("troupe_kv_blocks_total", "KV blocks in the pool.", st->kv_blocks_total);
    g += "# HELP troupe_prefix_cache_hit_tokens_scheduler_total Prompt tokens reused from the prefix cache.\n"
         "# TYPE troupe_prefix_cache_hit_tokens_scheduler_total counter\n"
         "troupe_prefix_cache_hit_tokens_scheduler_total " + std::to_string(st->prefix_hit_tokens) + "\n";
    g += "# HELP troupe_spec_proposed_total Speculative tokens proposed for verification.\n"
         "# TYPE troupe_spec_proposed_total counter\n"
         "troupe_spec_proposed_total " + std::to_string(st->spec_proposed) + "\n";
    g += "# HELP troupe_spec_accepted_total Speculative tokens the model accepted (each saves a decode step).\n"
         "# TYPE troupe_spec_accepted_total counter\n"
         "troupe_spec_accepted_total " + std::to_string(st->spec_accepted) + "\n";
    g += "# HELP troupe_spec_rule_probes_total Speculations let through against the measured cost rule, to "
         "measure the step time it rests on again (speculative.probe_steps).\n"
         "# TYPE troupe_spec_rule_probes_total counter\n"
         "troupe_spec_rule_probes_total " + std::to_string(st->spec_rule_probes) + "\n";
    std::string health;
    if (auto cs = p->get_cache_stats(std::chrono::seconds(2))) {
      g += "# HELP troupe_response_cache_lookups_total Response cache lookups.\n# TYPE troupe_response_cache_lookups_total counter\n"
           "troupe_response_cache_lookups_total " + std::to_string(cs->lookups) + "\n";
      g += "# HELP troupe_response_cache_hits_total Response cache hits.\n# TYPE troupe_response_cache_hits_total counter\n"
           "troupe_response_cache_hits_total " + std::to_string(cs->hits) + "\n";
      g += "# HELP troupe_response_cache_semantic_hits_total Response cache hits found by meaning (not the exact text).\n"
           "# TYPE troupe_response_cache_semantic_hits_total counter\n"
           "troupe_response_cache_semantic_hits_total " + std::to_string(cs->semantic_hits) + "\n";
      gauge("troupe_response_cache_entries", "Answers held by the response cache.", cs->entries);
      gauge("troupe_response_cache_enabled", "1 when the response cache serves lookups.", cs->enabled ? 1 : 0);
      net::json_writer w;
      w.key("cache").begin_object().field("enabled", cs->enabled).field("policy", cs->policy);
      w.field("entries", cs->entries).field("lookups", cs->lookups).field("hits", cs->hits);
      if (!cs->status.empty()) w.field("status", cs->status);
      w.end_object();
      health += (health.empty() ? "" : ",") + w.take();
    }
    std::lock_guard<std::mutex> lock(mu_);
    gauges_ = std::move(g);
    health_ = std::move(health);
  }

  // The heap trim refresh_gauges found due: slow on a large heap, so after the figures are out.
  void trim_heap_if_idle() {
    if (std::exchange(trim_wanted_, false)) ::malloc_trim(0);
  }

  // The router's figures, refreshed more often than the rest in a cluster (see impl::poll):
  // /health's status says at once when no replica is left.
  void refresh_router() {
    actors::pipeline* p = current_pipeline();
    if (!p) return;
    auto rs = p->get_router_stats(std::chrono::seconds(2));
    if (!rs) return;
    std::lock_guard<std::mutex> lock(mu_);
    take_router_stats(*rs);
  }

  void stop() {
    stop_jobs();
    std::unique_ptr<actors::client> c;
    std::unique_ptr<actors::pipeline> p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_ = false;
      c = std::move(client_);
      p = std::move(pipeline_);
    }
    c.reset();
    if (p) p->stop();
  }

 private:
  std::string name_;
  std::atomic<bool> ready_{false};
  mutable std::mutex mu_;
  std::unique_ptr<actors::pipeline> pipeline_;
  std::unique_ptr<actors::client> client_;
  std::string gauges_;
  std::string health_;
  std::string router_gauges_;
  std::string router_health_;
  std::string unavailable_;  // unavailable()'s answer, from the router's last figures
  bool busy_since_trim_ = false;  // the poller thread's
  bool trim_wanted_ = false;      // likewise
  app::fresh_figures fresh_;
  std::function<void(const std::string&, std::function<void(admin_reply)>)> admin_;
  std::function<std::string()> extra_metrics_;
  // /tokenize, /detokenize and /v1/embeddings.
  std::string embedder_name_ = "minilm";
  cache::embedder_options embedder_opts_;
  std::unique_ptr<cache::embedder> embedder_;  // the embed thread's, made on first use
  job_thread text_jobs_{256};
  job_thread embed_jobs_{64};
  std::atomic<bool> jobs_stopping_{false};

  // Under mu_.
  void take_router_stats(const actors::router_stats& rs) {
    router_gauges_ = router_metrics(rs);
    router_health_ = router_health(rs);
    // No replica listed yet: the router has not been given the pipeline's own (it is on its
    // way), which is no reason to refuse.
    unavailable_ = rs.no_replica.empty() || rs.replicas.empty() ? "" : "no_replica";
  }

  std::shared_ptr<const actors::text_codec> codec_now() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pipeline_ ? pipeline_->codec() : nullptr;
  }

  // The names /v1/embeddings answers to: the served model's, the embedder's config name
  // ("minilm"), its model folder's ("all-MiniLM-L6-v2") and its full name ("minilm/256/f16").
  std::vector<std::string> embedding_model_names() const {
    std::vector<std::string> names{name_, embedder_name_};
    if (auto dir = embedder_folder(); !dir.empty()) names.push_back(dir);
    if (embedder_) names.push_back(embedder_->name());
    return names;
  }
  // MiniLM's model folder ("all-MiniLM-L6-v2"), or "" for another embedder.
  std::string embedder_folder() const {
    if (embedder_name_ != "minilm") return {};
    std::string dir = embedder_opts_.model_dir;
    while (!dir.empty() && dir.back() == '/') dir.pop_back();
    if (auto slash = dir.find_last_of('/'); slash != std::string::npos) dir = dir.substr(slash + 1);
    return dir;
  }
  // The embedding model as /v1/models lists it: the name OpenAI-style clients know it by.
  std::string listed_embedding_model() const {
    auto dir = embedder_folder();
    return dir.empty() ? embedder_name_ : dir;
  }

  // On the embed thread.
  reply<net::embedding_result> embed_now(const net::embedding_query& q) {
    reply<net::embedding_result> out;
    if (!embedder_) {
      auto made = cache::embedder_registry().make(embedder_name_, embedder_opts_);
      if (!made) {
        net::api_error e = net::from_pipeline_error({0, "loading", "the embedder '" + embedder_name_ +
                                                                      "' is not available: " + made.error(), 0});
        e.code = "embedder_unavailable";
        out.error = e;
        return out;
      }
      embedder_ = std::move(made.value());
    }
    const auto names = embedding_model_names();
    if (!q.model.empty() && std::find(names.begin(), names.end(), q.model) == names.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
      net::api_error e = net::from_pipeline_error(
          {0, actors::errc::unknown_model, "model '" + q.model + "' does not make embeddings here (use one of " + list + ")", 0});
      e.param = "model";
      out.error = e;
      return out;
    }
    if (q.dimensions != 0 && q.dimensions != embedder_->dimension()) {
      out.error = net::bad_request("'dimensions' must be " + std::to_string(embedder_->dimension()) + " (" +
                                       embedder_->name() + " makes vectors of that size only)",
                                   "dimensions");
      return out;
    }
    auto* minilm = dynamic_cast<const cache::minilm_embedder*>(embedder_.get());
    // A text longer than the embedder's window would be embedded cut: refused instead, as OpenAI
    // refuses one over its model's context, before any input is embedded.
    for (size_t i = 0; i < q.inputs.size(); ++i) {
      if (embedder_->fits(q.inputs[i])) continue;
      const std::string at = q.inputs.size() == 1 ? "input" : "input[" + std::to_string(i) + "]";
      std::string why = "'" + at + "' is longer than " + embedder_->name() + " reads";
      if (minilm)
        why = "'" + at + "' is " + std::to_string(minilm->n_tokens(q.inputs[i])) + " tokens long ([CLS] and [SEP] " +
              "included), over the " + std::to_string(minilm->max_tokens()) + " tokens " + embedder_->name() + " reads";
      out.error = net::bad_request(why + ": split it into shorter texts", at, "context_length_exceeded");
      return out;
    }
    out.value.model = q.model.empty() ? embedder_name_ : q.model;
    out.value.vectors.reserve(q.inputs.size());
    for (size_t i = 0; i < q.inputs.size(); ++i) {
      // A list of 2048 long texts is minutes of embedder time: it ends early when the server
      // stops (the shutdown grace must hold) or nobody waits for it (the next request would wait).
      if (jobs_stopping_) {
        net::api_error e = net::from_pipeline_error(
            {0, "loading", "the server is shutting down; retry on another instance", 5000});
        e.code = "shutting_down";
        out.error = e;
        return out;
      }
      if (q.abandoned && q.abandoned()) {  // the answer would go nowhere
        spdlog::info("troupe: embeddings: the client left; stopped after {} of {} inputs", i, q.inputs.size());
        out.error = net::from_pipeline_error({0, actors::errc::internal, "the client left", 0});
        return out;
      }
      auto v = embedder_->embed(q.inputs[i]);
      if (!v) {
        const std::string at = q.inputs.size() == 1 ? "input" : "input[" + std::to_string(i) + "]";
        out.error = net::bad_request("'" + at + "' cannot be embedded: " + v.error(), at);
        return out;
      }
      out.value.vectors.push_back(std::move(v.value()));
      // The embedder's own tokens ([CLS] and [SEP] included); other embedders have none to count.
      if (minilm) out.value.prompt_tokens += static_cast<int64_t>(minilm->token_ids(q.inputs[i]).size());
    }
    return out;
  }
};

}  // namespace

struct serve_instance::impl {
  serve_options opts;
  actors::runtime rt;  // first: the actor system outlives everything that talks to it
  uint16_t cluster_port = 0;  // where workers join (cluster.listen), once published
  net::metrics met;
  pipeline_inference inf;
  std::unique_ptr<net::server> srv;  // after the actor system (its io_context must go first)
  std::thread loader;
  std::thread poller;
  // One thread per admin action (a reload waits for the pipeline, so it cannot run on an I/O
  // thread). Each marks itself finished; the next action joins the finished ones, stop() the
  // rest. A thread that has exited keeps its stack until it is joined: about 140 KB resident
  // per reload, which grew the issue 24 soak's RSS by 25 MB in 180 reloads.
  struct admin_thread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  std::vector<admin_thread> admin_threads;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool load_done = false;
  std::string load_error;
  bool stopping = false;
  bool stopped = false;

  explicit impl(serve_options o) :
      opts(std::move(o)),
      rt(opts.config.cluster.listen.empty() ? actors::runtime_options{} : cluster_runtime(opts.config.cluster, opts.config.pipeline.router.dead_after_ms)),
      inf(opts.config.model.name.empty() ? stem(opts.config.model.path) : opts.config.model.name) {
    const auto& semantic = opts.config.pipeline.cache.semantic;
    inf.set_embedder(semantic.embedder, semantic.embedder_opts);
  }

  void load() {
    std::string err;
    const auto& conf = opts.config;
    auto m = opts.load_model ? opts.load_model(conf.model.path) : model::llama_model::load(conf.model.path);
    if (!m) {
      err = "cannot load " + conf.model.path + ": " + m.error();
    } else {
      auto cfg = conf.pipeline;
      cfg.model_name = inf.model_name();
      // Joining workers must compute as this replica does (docs/cluster.md).
      if (!conf.cluster.listen.empty()) cfg.router.numerics = numerics_of(conf, *m.value());
      auto p = actors::pipeline::start(rt.system(), cfg, m.value(), conf.backend, conf.model.backend);
      if (!p) {
        err = "cannot start the pipeline: " + p.error();
      } else if (!conf.cluster.listen.empty()) {
        auto port = publish_router(rt.system(), p.value()->links().router, conf.cluster);
        if (!port) err = port.error();
        else cluster_port = port.value();
      }
      if (err.empty() && p) inf.set(std::move(p.value()));
    }
    std::lock_guard<std::mutex> lock(mu);
    load_done = true;
    load_error = err;
    cv.notify_all();
  }

  // Refreshes the gauges and /health's details every 2 s. A front's router figures every
  // cluster.report_ms: they decide /health's status (503 no_replica when no replica can take a
  // request), which a load balancer polls; asking the router is one message.
  void poll() {
    using namespace std::chrono;
    const auto full_every = seconds(2);
    const auto router_every = opts.config.cluster.listen.empty()
                                  ? milliseconds(full_every)
                                  : std::clamp(milliseconds(opts.config.pipeline.router.report_ms), milliseconds(50),
                                               milliseconds(full_every));
    auto next_full = steady_clock::now();
    std::unique_lock<std::mutex> lock(mu);
    uint64_t served = 0;  // the requests the last full round answered (their tickets)
    while (!stopping) {
      lock.unlock();
      // Read before the round: a request counted here is answered by it; one that comes during
      // it has a ticket above `asked`, and the wait below ends at once for it.
      const uint64_t asked = inf.freshness().asked();
      const bool full = asked > served || steady_clock::now() >= next_full;
      if (full) {
        inf.refresh_gauges();
        next_full = steady_clock::now() + full_every;
      }
      inf.refresh_router();
      if (full) served = asked;
      inf.freshness().answered(full ? asked : 0);  // also those held past max_wait
      inf.trim_heap_if_idle();
      const auto wait = inf.freshness().holding() ? std::min<milliseconds>(router_every, milliseconds(50)) : router_every;
      lock.lock();
      cv.wait_for(lock, wait, [&] { return stopping || inf.freshness().asked() > served; });
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopped) return;
      stopped = stopping = true;
      cv.notify_all();
    }
    if (loader.joinable()) loader.join();
    if (poller.joinable()) poller.join();
    inf.freshness().set_waker({});  // no rounds any more: held /metrics and /health requests answer now
    inf.stop_jobs();  // before the server: a job's answer goes to a session of its io_context
    std::vector<admin_thread> admins;
    {
      std::lock_guard<std::mutex> lock(mu);
      admins.swap(admin_threads);
    }
    for (auto& a : admins)
      if (a.thread.joinable()) a.thread.join();
    if (srv) srv->stop();  // no I/O thread runs from here on
    inf.stop();            // then no pipeline thread calls into the sessions
    srv.reset();
  }
};

serve_instance::serve_instance(std::unique_ptr<impl> i) : impl_(std::move(i)) {}

serve_instance::~serve_instance() { stop(); }

result<std::unique_ptr<serve_instance>> serve_instance::start(serve_options o) {
  if (auto ok = check_cluster(o.config.cluster); !ok) return make_error(ok.error());
  auto i = std::make_unique<impl>(std::move(o));
  i->srv = std::make_unique<net::server>(i->opts.config.server, i->inf, i->met);
  if (auto s = i->srv->start(); !s) return make_error(s.error());
  auto* raw = i.get();
  i->loader = std::thread([raw] { raw->load(); });
  raw->inf.freshness().set_waker([raw] {
    std::lock_guard<std::mutex> lock(raw->mu);  // not between the poller's test and its wait
    raw->cv.notify_all();
  });
  i->poller = std::thread([raw] { raw->poll(); });
  std::unique_ptr<serve_instance> inst(new serve_instance(std::move(i)));
  if (raw->opts.admin) {
    auto* self = inst.get();
    raw->inf.set_admin(
        [raw, self](const std::string& action, std::function<void(net::inference::admin_reply)> done) {
          std::vector<impl::admin_thread> finished;
          {
            std::lock_guard<std::mutex> lock(raw->mu);
            if (raw->stopping) return done({503, R"({"error":{"message":"the server is stopping","code":"stopping"}})"});
            auto& all = raw->admin_threads;
            const auto running = std::partition(all.begin(), all.end(), [](const impl::admin_thread& a) { return !*a.finished; });
            std::move(running, all.end(), std::back_inserter(finished));
            all.erase(running, all.end());
            auto flag = std::make_shared<std::atomic<bool>>(false);
            all.push_back({std::thread([raw, self, action, flag, done = std::move(done)] {
                             done(raw->opts.admin(*self, action));
                             flag->store(true);
                           }),
                           flag});
          }
          // Outside the lock: what is left of a finished thread (its lambda's captures) may
          // still be running down; that is quick.
          for (auto& a : finished) a.thread.join();
        },
        raw->opts.config_metrics);
  } else if (raw->opts.config_metrics) {
    raw->inf.set_admin({}, raw->opts.config_metrics);
  }
  return inst;
}

result<std::vector<std::string>> serve_instance::reconfigure(const actors::pipeline_config& next,
                                                             const std::set<std::string>& stages) {
  return impl_->inf.reconfigure(next, stages);
}

std::vector<std::string> serve_instance::workers() { return impl_->inf.workers(); }

net::inference::admin_reply serve_instance::admin(const std::string& action) {
  if (!impl_->opts.admin) return {404, "{}"};
  return impl_->opts.admin(*this, action);
}

uint16_t serve_instance::port() const { return impl_->srv ? impl_->srv->port() : 0; }
bool serve_instance::ready() const { return impl_->inf.ready(); }

bool serve_instance::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait_for(lock, timeout, [&] { return impl_->load_done; });
  return impl_->load_done && impl_->load_error.empty();
}

std::string serve_instance::load_error() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->load_error;
}

bool serve_instance::load_finished() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->load_done;
}

void serve_instance::stop() {
  if (impl_) impl_->stop();
}

void serve_instance::begin_drain() {
  if (impl_ && impl_->srv) impl_->srv->begin_drain();
}

int64_t serve_instance::in_flight() const { return impl_ && impl_->srv ? impl_->srv->in_flight() : 0; }

int run_serve(const serve_options& o) {
  // Every thread started from here on inherits the mask; this thread takes the signals.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto inst = serve_instance::start(o);
  if (!inst) {
    std::fprintf(stderr, "troupe serve: %s\n", inst.error().c_str());
    return 1;
  }
  auto& s = *inst.value();
  // An IPv6 host goes in brackets in a URL (http://[::1]:8080/).
  const std::string& host = o.config.server.host;
  const std::string url_host = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  const std::string base = std::string(o.config.server.tls_cert.empty() ? "http://" : "https://") + url_host + ":" + std::to_string(s.port());
  std::printf("troupe serve: listening on %s, loading %s ...\n", base.c_str(), o.config.model.path.c_str());
  std::fflush(stdout);
  bool announced = false;
  for (;;) {
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGHUP) {
      const auto r = s.admin("reload");
      std::printf("troupe serve: SIGHUP: reload answered %d %s\n", r.status, r.body.c_str());
      std::fflush(stdout);
      continue;
    }
    if (sig == SIGINT || sig == SIGTERM) {
      // Graceful: stop taking requests, let the running ones finish within the grace period;
      // a second signal (or the end of the period) stops at once.
      s.begin_drain();
      const auto grace = o.config.server.shutdown_grace;
      std::printf("troupe serve: %s, shutting down: %lld running requests may finish within %lld s "
                  "(signal again to stop now)\n",
                  sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(s.in_flight()),
                  static_cast<long long>(grace.count()));
      std::fflush(stdout);
      const auto deadline = std::chrono::steady_clock::now() + grace;
      while (s.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
        timespec tick{0, 50 * 1000 * 1000};
        const int again = sigtimedwait(&set, nullptr, &tick);
        if (again == SIGINT || again == SIGTERM) break;
      }
      if (s.in_flight() > 0)
        std::printf("troupe serve: stopping with %lld requests still running\n", static_cast<long long>(s.in_flight()));
      if (!s.load_finished()) {
        // stop() would join the loader, which cannot be interrupted: it may read a model file
        // on a stalled mount or repack gigabytes of weights, so the signal would wait for the
        // whole load. Nothing has been served yet and nothing needs saving, so end here.
        std::fprintf(stderr, "troupe serve: stopped while the model was loading\n");
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(0);
      }
      break;
    }
    if (!announced && s.wait_ready(std::chrono::milliseconds(0))) {
      announced = true;
      std::printf("troupe serve: model loaded; chat page at %s/ (API at %s/v1)\n", base.c_str(), base.c_str());
      std::fflush(stdout);
    } else if (!announced && !s.load_error().empty()) {
      std::fprintf(stderr, "troupe serve: %s\n", s.load_error().c_str());
      s.stop();
      return 1;
    }
  }
  s.stop();
  std::printf("troupe serve: stopped\n");
  return 0;
}

}  // namespace troupe::app
