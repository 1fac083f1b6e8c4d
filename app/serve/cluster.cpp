#include "app/serve/cluster.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "actors/detail/caf_util.hpp"
#include "model/matmul.hpp"
#include "net/json_writer.hpp"

namespace troupe::app {

result<host_port> parse_host_port(const std::string& s, const std::string& what) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    return make_error(what + " must be HOST:PORT, got '" + s + "'");
  host_port hp;
  hp.host = s.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') hp.host = hp.host.substr(1, hp.host.size() - 2);
  char* end = nullptr;
  const long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535)
    return make_error(what + ": '" + s.substr(colon + 1) + "' is not a port (0..65535)");
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

namespace {

std::string openssl_reason() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no reason given";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

}  // namespace

// CAF's OpenSSL layer reads the files only when a link opens, and a bad one then ends the process
// (std::terminate on the front at the first connection; a worker hangs): they are read here first,
// as CAF will read them.
status check_tls_files(const config::cluster_options& c) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_method()), &SSL_CTX_free);
  if (!ctx) return make_error("cannot make a TLS context: " + openssl_reason());
  // An encrypted key: no passphrase prompt (CAF would get none either), an error that says so.
  SSL_CTX_set_default_passwd_cb(ctx.get(), [](char*, int, int, void*) { return 0; });
  // The key first: loaded after the certificate, a key of another pair fails as "not a key".
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), c.tls_key.c_str(), SSL_FILETYPE_PEM) != 1)
    return make_error("cluster.tls_key '" + c.tls_key + "' is not an unencrypted PEM private key: " + openssl_reason());
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), c.tls_certificate.c_str()) != 1)
    return make_error("cluster.tls_certificate '" + c.tls_certificate + "' is not a PEM certificate: " + openssl_reason());
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return make_error("cluster.tls_key '" + c.tls_key + "' does not belong to cluster.tls_certificate '" +
                      c.tls_certificate + "': " + openssl_reason());
  if (SSL_CTX_load_verify_locations(ctx.get(), c.tls_ca.c_str(), nullptr) != 1)
    return make_error("cluster.tls_ca '" + c.tls_ca + "' holds no PEM CA certificate: " + openssl_reason());
  return {};
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

status check_cluster(const config::cluster_options& c) {
  const int set = !c.tls_certificate.empty() + !c.tls_key.empty() + !c.tls_ca.empty();
  if (set != 0 && set != 3)
    return make_error("cluster.tls_certificate, cluster.tls_key and cluster.tls_ca go together: set all three or none");
  for (const auto* path : {&c.tls_certificate, &c.tls_key, &c.tls_ca})
    if (!path->empty() && ::access(path->c_str(), R_OK) != 0)
      return make_error("cannot read " + *path + " (a cluster.tls_* file)");
  if (c.tls())
    if (auto ok = check_tls_files(c); !ok) return ok;
  if (c.listen.empty()) return {};
  auto hp = parse_host_port(c.listen, "cluster.listen");
  if (!hp) return make_error(hp.error());
  if (!is_loopback(hp->host) && !c.tls())
    return make_error("cluster.listen = '" + c.listen +
                      "' is not a loopback address: set cluster.tls_certificate, cluster.tls_key and cluster.tls_ca "
                      "(scripts/make-cluster-certs.sh makes them), or listen on 127.0.0.1 (plain TCP is for "
                      "loopback only; see docs/cluster.md)");
  return {};
}

actors::runtime_options cluster_runtime(const config::cluster_options& c, int64_t dead_after_ms) {
  actors::runtime_options o;
  o.network = true;
  o.connection_timeout_ms = std::max<int64_t>(o.connection_timeout_ms, dead_after_ms);
  o.tls_certificate = c.tls_certificate;
  o.tls_key = c.tls_key;
  o.tls_ca = c.tls_ca;
  return o;
}

result<uint16_t> publish_router(caf::actor_system& sys, const caf::actor& router, const config::cluster_options& c) {
  auto hp = parse_host_port(c.listen, "cluster.listen");
  if (!hp) return make_error(hp.error());
  if (!router) return make_error("the pipeline has no router to publish");
  auto handle = caf::actor_cast<actors::router_actor>(router);
  auto port = c.tls() ? caf::openssl::publish(handle, hp->port, hp->host.c_str(), true)
                      : sys.middleman().publish(handle, hp->port, hp->host.c_str(), true);
  if (!port) return make_error("cannot listen for workers on " + c.listen + ": " + sys.render(port.error()));
  return *port;
}

result<actors::router_actor> connect_router(caf::actor_system& sys, const host_port& front, bool tls) {
  auto r = tls ? caf::openssl::remote_actor<actors::router_actor>(sys, front.host, front.port)
               : sys.middleman().remote_actor<actors::router_actor>(front.host, front.port);
  if (!r) return make_error(sys.render(r.error()));
  return std::move(*r);
}

namespace {

// A digest of what the model computes with: its hyper-parameters, its tensors' names, types and
// shapes, and three 4 KiB samples (start, middle, end) of every tensor's data. Not a hash of the
// whole file, which would take seconds at every start for a model of several GB (and page in
// weights a fast-order backend has just let go); any two different quantizations or fine-tunes
// of a model differ in these samples.
std::string weights_digest(const model::llama_model& m) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  const auto add = [&](const void* p, size_t n) { EVP_DigestUpdate(ctx.get(), p, n); };
  const auto add_text = [&](const std::string& t) { add(t.c_str(), t.size() + 1); };
  const auto& hp = m.params();
  add_text(hp.arch);
  for (int v : {hp.n_vocab, hp.n_ctx_train, hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_ff,
                hp.n_rot, static_cast<int>(hp.rope), static_cast<int>(hp.qkv_bias), static_cast<int>(hp.tied_output)})
    add(&v, sizeof v);
  for (float v : {hp.rope_freq_base, hp.rope_freq_scale, hp.rms_eps}) add(&v, sizeof v);
  constexpr size_t sample = 4096;
  for (const auto& t : m.file().tensors()) {
    add_text(t.name);
    const auto type = static_cast<int>(t.type);
    add(&type, sizeof type);
    for (int64_t d : t.dims) add(&d, sizeof d);
    add(&t.bytes, sizeof t.bytes);
    if (!t.data) continue;
    for (size_t at : {size_t{0}, t.bytes / 2, t.bytes > sample ? t.bytes - sample : size_t{0}})
      add(t.data + std::min(at, t.bytes), std::min(sample, t.bytes - std::min(at, t.bytes)));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n && i < 16; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

// The order the cpu backend will run: the option, TROUPE_MATMUL_ORDER over it, and "fast" only
// where this CPU has a fast kernel for one of the matrices at least (model/cpu_backend.cpp
// decides the same way; the backend is built later, in the executor, so it cannot be asked).
model::matmul_order matmul_that_runs(const model::backend_options& o, const model::llama_model& m) {
  model::matmul_order want = o.matmul;
  if (const char* env = std::getenv("TROUPE_MATMUL_ORDER"))
    if (auto parsed = model::parse_matmul_order(env)) want = *parsed;
  if (want != model::matmul_order::fast) return want;
  bool packs = model::packed_bytes(m.output()) > 0;
  for (const auto& L : m.layers())
    for (const auto* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) packs = packs || model::packed_bytes(*w) > 0;
  return packs ? model::matmul_order::fast : model::matmul_order::llama_cpp;
}

std::string label_value(const std::string& s) {
  std::string out;
  for (char c : s) out += (c == '"' || c == '\\' || c == '\n') ? '_' : c;
  return out;
}

}  // namespace

actors::replica_numerics numerics_of(const config::troupe_config& c, const model::llama_model& m) {
  actors::replica_numerics n;
  n["model.weights"] = weights_digest(m);
  n["model.backend"] = c.model.backend;
  if (c.model.backend == "cpu") n["model.matmul"] = model::matmul_order_name(matmul_that_runs(c.backend, m));
  n["kv.type"] = c.backend.kv_q8 ? "q8" : c.backend.kv_f32 ? "f32" : "f16";
  n["kv.block_size"] = std::to_string(c.backend.block_size);
  return n;
}

std::string router_metrics(const actors::router_stats& s) {
  std::string g;
  auto head = [&](const char* name, const char* help, const char* type) {
    g += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  // One series per replica for its whole life: the state is not a label of the value series
  // (a label that changes would end one series and start another).
  auto label = [](const actors::replica_stats& r) {
    return "{replica=\"" + std::to_string(r.id) + "\",name=\"" + label_value(r.name) + "\"}";
  };
  const auto dead = [](const actors::replica_stats& r) { return r.state == "dead"; };
  // Replicas that take requests or finish what they hold (not the front's standby one).
  const auto serves = [](const actors::replica_stats& r) { return r.state == "ready" || r.state == "draining"; };
  head("troupe_replica_up", "1 for a replica taking new requests, 0 draining, standby or dead.", "gauge");
  for (const auto& r : s.replicas) g += "troupe_replica_up" + label(r) + " " + (r.state == "ready" ? "1" : "0") + "\n";
  head("troupe_replica_state",
       "The replica's state, one series per state, 1 for the one it is in (ready, draining, standby, dead).", "gauge");
  for (const auto& r : s.replicas) {
    const std::string l = label(r);
    for (const char* st : {"ready", "draining", "standby", "dead"})
      g += "troupe_replica_state" + l.substr(0, l.size() - 1) + ",state=\"" + st + "\"} " + (r.state == st ? "1" : "0") + "\n";
  }
  auto live_gauge = [&](const char* name, const char* help, auto value) {
    head(name, help, "gauge");
    for (const auto& r : s.replicas)
      if (!dead(r)) g += name + label(r) + " " + std::to_string(value(r)) + "\n";
  };
  live_gauge("troupe_replica_in_flight", "Requests the router has placed on the replica and not seen end (live replicas).",
             [](const actors::replica_stats& r) { return r.in_flight; });
  live_gauge("troupe_replica_running_sequences", "Sequences holding KV on the replica (its last load report; live replicas).",
             [](const actors::replica_stats& r) { return r.load.running; });
  live_gauge("troupe_replica_waiting_sequences", "Sequences waiting on the replica (its last load report; live replicas).",
             [](const actors::replica_stats& r) { return r.load.waiting; });
  live_gauge("troupe_replica_kv_blocks_available",
             "Free or evictable KV blocks on the replica (its last load report; live replicas).",
             [](const actors::replica_stats& r) { return r.load.kv_blocks_available; });
  head("troupe_replica_placed_total", "Requests placed on the replica (continuations of migrated ones included).", "counter");
  for (const auto& r : s.replicas) g += "troupe_replica_placed_total" + label(r) + " " + std::to_string(r.placed) + "\n";
  head("troupe_replica_tokens_total", "Tokens passed on from the replica.", "counter");
  for (const auto& r : s.replicas) g += "troupe_replica_tokens_total" + label(r) + " " + std::to_string(r.tokens) + "\n";

  int64_t ready = 0, running = 0, waiting = 0, kv_available = 0, kv_total = 0;
  for (const auto& r : s.replicas) {
    ready += r.state == "ready" ? 1 : 0;
    if (!serves(r)) continue;
    running += r.load.running;
    waiting += r.load.waiting;
    kv_available += r.load.kv_blocks_available;
    kv_total += r.load.kv_blocks_total;
  }
  auto total = [&](const char* name, const char* help, int64_t v) {
    head(name, help, "gauge");
    g += std::string(name) + " " + std::to_string(v) + "\n";
  };
  total("troupe_replicas_ready", "Replicas taking new requests (0: every request gets 503 no_replica).", ready);
  total("troupe_cluster_running_sequences", "Sequences holding KV on every replica that serves (ready or draining).", running);
  total("troupe_cluster_waiting_sequences", "Sequences waiting on every replica that serves (ready or draining).", waiting);
  total("troupe_cluster_kv_blocks_available", "Free or evictable KV blocks of every replica that serves.", kv_available);
  total("troupe_cluster_kv_blocks_total", "KV blocks of every replica that serves.", kv_total);
  head("troupe_migrations_total", "Requests moved off a dead replica onto another.", "counter");
  g += "troupe_migrations_total " + std::to_string(s.migrations) + "\n";
  head("troupe_replica_deaths_total", "Replicas declared dead (connection closed or silent too long).", "counter");
  g += "troupe_replica_deaths_total " + std::to_string(s.replica_deaths) + "\n";
  head("troupe_requests_refused_no_replica_total", "Requests failed because no replica was live.", "counter");
  g += "troupe_requests_refused_no_replica_total " + std::to_string(s.refused_no_replica) + "\n";
  return g;
}

std::string router_health(const actors::router_stats& s) {
  net::json_writer w;
  int64_t ready = 0;
  for (const auto& r : s.replicas) ready += r.state == "ready" ? 1 : 0;
  w.key("router").begin_object().field("policy", s.policy).field("replicas_ready", ready);
  if (!s.no_replica.empty()) w.field("no_replica", s.no_replica);
  w.field("migrations", s.migrations).field("replica_deaths", s.replica_deaths);
  w.key("replicas").begin_array();
  for (const auto& r : s.replicas) {
    w.begin_object().field("id", static_cast<int64_t>(r.id)).field("name", r.name).field("state", r.state);
    w.field("in_flight", static_cast<int64_t>(r.in_flight)).field("running", static_cast<int64_t>(r.load.running));
    w.field("waiting", static_cast<int64_t>(r.load.waiting));
    w.field("max_num_seqs", static_cast<int64_t>(r.load.max_num_seqs));  // its batch limit in force
    w.field("kv_blocks_available", static_cast<int64_t>(r.load.kv_blocks_available));
    w.field("placed", r.placed).end_object();
  }
  w.end_array().end_object();
  return w.take();
}

}  // namespace troupe::app
