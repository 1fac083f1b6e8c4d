#include "actors/router/router_state.hpp"

#include <algorithm>
#include <utility>

#include "model/kv_block_pool.hpp"

namespace troupe::actors {
namespace {

constexpr const char* ready = "ready";
constexpr const char* draining = "draining";
constexpr const char* dead = "dead";

// Chained hashes of the whole blocks of `tokens` (hash i covers blocks 0..i).
std::vector<uint64_t> block_hashes(const std::vector<int32_t>& tokens, int32_t block_size) {
  std::vector<uint64_t> out;
  if (block_size <= 0) return out;
  uint64_t prev = 0;
  for (size_t at = 0; at + static_cast<size_t>(block_size) <= tokens.size(); at += static_cast<size_t>(block_size)) {
    prev = model::block_hash(prev, tokens.data() + at, block_size);
    out.push_back(prev);
  }
  return out;
}

std::string replica_label(uint64_t id, const std::string& name) {
  return "replica " + std::to_string(id) + (name.empty() ? std::string() : " (" + name + ")");
}

}  // namespace

router_state::router_state(router_config cfg, std::unique_ptr<routing_policy> policy)
    : cfg_(std::move(cfg)), policy_(std::move(policy)) {}

// --- replicas -------------------------------------------------------------------------------

void router_state::add_local(int32_t block_size, int64_t now_us) {
  replica r;
  r.id = 0;
  r.name = "local";
  r.block_size = block_size;
  r.local = true;
  r.last_report_us = now_us;
  replicas_[0] = std::move(r);
}

std::string router_state::numerics_conflict(const replica_numerics& theirs) const {
  const replica_numerics* ours = nullptr;
  std::string whose;
  if (cfg_.use_local && !cfg_.numerics.empty()) {
    ours = &cfg_.numerics;
    whose = "the front's own replica";
  } else {
    for (const auto& [id, r] : replicas_)
      if (!r.local && r.state != dead) {
        ours = &r.numerics;
        whose = replica_label(id, r.name);
        break;
      }
  }
  if (!ours) return {};
  const auto value = [](const replica_numerics& n, const std::string& key) {
    auto it = n.find(key);
    return it == n.end() ? std::string("(not reported)") : "'" + it->second + "'";
  };
  std::vector<std::string> keys;
  for (const auto& [k, v] : *ours) keys.push_back(k);
  for (const auto& [k, v] : theirs)
    if (!ours->count(k)) keys.push_back(k);
  for (const auto& key : keys) {
    const auto mine = ours->find(key), its = theirs.find(key);
    if (mine != ours->end() && its != theirs.end() && mine->second == its->second) continue;
    // What a user sets to make them agree (not every key is a config key).
    static const std::map<std::string, std::string> fix = {
        {"model.weights", "serve the same model file"},
        {"kv.type", "set the same kv.f32 and kv.q8"},
        {"model.matmul", "set the same model.matmul (and TROUPE_MATMUL_ORDER, which overrides it)"}};
    const auto f = fix.find(key);
    return key + " differs: this worker's is " + value(theirs, key) + ", the cluster's is " + value(*ours, key) +
           " (" + whose + "); replicas must compute alike (greedy answers would differ between them, and a request "
           "moved from one to another would change numerics mid-answer): " +
           (f != fix.end() ? f->second : "set the same " + key) + " on every node";
  }
  return {};
}

uint64_t router_state::add_replica(std::string name, int32_t block_size, int64_t now_us, replica_numerics numerics) {
  replica r;
  r.id = next_replica_++;
  r.name = std::move(name);
  r.block_size = block_size;
  r.numerics = std::move(numerics);
  r.last_report_us = now_us;  // a fresh replica has dead_after_ms to send its first report
  const uint64_t id = r.id;
  fx_.log.push_back(replica_label(id, r.name) + " joined");
  replicas_[id] = std::move(r);
  return id;
}

std::string router_state::name_conflict(const std::string& name) const {
  for (const auto& [id, r] : replicas_)
    if (!name.empty() && r.name == name && r.state != "dead")
      return "a live replica is named '" + name + "' already (replica " + std::to_string(id) +
             "): give each worker its own --name, unless it replaces that one";
  return {};
}

void router_state::on_report(uint64_t replica_id, const load_report& r, int64_t now_us) {
  auto it = replicas_.find(replica_id);
  // A dead replica's report is late or from a connection that came back: it must rejoin (with a
  // new id) to serve again, so that it cannot double-serve what moved away from it.
  if (it == replicas_.end() || it->second.state == dead) return;
  it->second.load = r;
  it->second.last_report_us = now_us;
  if (r.draining) drain(replica_id);
}

void router_state::drain(uint64_t replica_id) {
  auto it = replicas_.find(replica_id);
  if (it == replicas_.end() || it->second.state != ready) return;
  it->second.state = draining;
  fx_.log.push_back(replica_label(replica_id, it->second.name) + " is draining: no new requests, " +
                    std::to_string(it->second.in_flight) + " in flight finish there");
}

void router_state::kill(uint64_t replica_id, const std::string& why, int64_t now_us) {
  auto it = replicas_.find(replica_id);
  if (it == replicas_.end() || it->second.state == dead) return;
  replica& gone = it->second;
  const std::string label = replica_label(replica_id, gone.name);
  // A drained replica with nothing left in flight leaving is the end of a drain, not a death.
  const bool drained = gone.state == draining && gone.in_flight == 0;
  gone.state = dead;
  gone.died_us = now_us;
  gone.load = load_report{};  // its last report says nothing of a replica that is gone
  gone.prefixes.clear();
  gone.prefix_lru.clear();
  if (drained) {
    fx_.log.push_back(label + " left after draining (" + why + ")");
    return;
  }
  ++deaths_;
  std::vector<uint64_t> orphans;
  for (const auto& [id, f] : flights_)
    if (f.replica == replica_id) orphans.push_back(id);
  std::sort(orphans.begin(), orphans.end());  // a reproducible order of placement
  fx_.log.push_back(label + " is dead (" + why + "); " + std::to_string(orphans.size()) +
                    " request(s) in flight there continue elsewhere");

  continue_lost(std::move(orphans), label, "died (" + why + ")", now_us);
}

void router_state::restarted(uint64_t replica_id, const std::string& why, int64_t now_us) {
  auto it = replicas_.find(replica_id);
  if (it == replicas_.end() || it->second.state == dead) return;
  const std::string label = replica_label(replica_id, it->second.name);
  it->second.prefixes.clear();  // its prefix cache went with it
  it->second.prefix_lru.clear();
  std::vector<uint64_t> lost;
  for (const auto& [id, f] : flights_)
    if (f.replica == replica_id) lost.push_back(id);
  std::sort(lost.begin(), lost.end());
  fx_.log.push_back(label + " lost its requests (" + why + "); " + std::to_string(lost.size()) +
                    " request(s) continue from the tokens already delivered");
  continue_lost(std::move(lost), label, "lost its requests (" + why + ")", now_us);
}

void router_state::continue_lost(std::vector<uint64_t> ids, const std::string& label, const std::string& what,
                                 int64_t now_us) {
  for (uint64_t id : ids) {
    flight& f = flights_.at(id);
    const uint64_t from = f.replica;
    release(f);
    const auto n = static_cast<int32_t>(f.delivered.size());
    const bool ended_by_eog = !f.delivered.empty() && std::find(f.original.eog.begin(), f.original.eog.end(),
                                                                f.delivered.back()) != f.original.eog.end();
    if (n >= f.original.max_tokens || ended_by_eog) {
      // Everything was delivered but the finish, which was lost with the replica: finish it here.
      seq_finished done;
      done.id = id;
      done.reason = ended_by_eog ? finish::stop : finish::length;
      done.usage.prompt_tokens = static_cast<int32_t>(f.original.prompt.size());
      done.usage.completion_tokens = n;
      fx_.to_streamer.finished.push_back(std::move(done));
      flights_.erase(id);
      continue;
    }
    if (place(id, now_us)) {
      ++migrations_;
      fx_.log.push_back("request " + std::to_string(id) + " moved from replica " + std::to_string(from) + " to " +
                        std::to_string(flights_.at(id).replica) + " after " + std::to_string(n) + " tokens");
      continue;
    }
    ++refused_;
    fx_.to_streamer.failed.push_back(seq_failed{
        id, errc::no_replica,
        label + " " + what + " after " + std::to_string(n) +
            " tokens of this request, and no engine replica is left to continue it (" +
            (unfit_.empty() ? no_replica_reason() : unfit_) + ")"});
    fx_.log.push_back("request " + std::to_string(id) + " failed: no replica to continue it after " + label + " " +
                      what);
    flights_.erase(id);
  }
}

std::vector<uint64_t> router_state::expire(int64_t now_us) {
  std::vector<uint64_t> silent;
  for (const auto& [id, r] : replicas_) {
    if (r.local || r.state == dead) continue;  // the local replica is polled, never silent
    if (now_us - r.last_report_us > cfg_.dead_after_ms * 1000) silent.push_back(id);
  }
  for (uint64_t id : silent) {
    const int64_t ms = (now_us - replicas_.at(id).last_report_us) / 1000;
    kill(id,
         "no load report for " + std::to_string(ms) + " ms (cluster.dead_after_ms = " +
             std::to_string(cfg_.dead_after_ms) + ")",
         now_us);
  }
  // Nothing refers to a dead replica any more (its requests moved or failed when it died; its
  // late outputs are dropped by the actor, which forgot its door then): forgetting it is safe.
  for (auto it = replicas_.begin(); it != replicas_.end();) {
    if (!it->second.local && it->second.state == dead && now_us - it->second.died_us > dead_kept_us) {
      it = replicas_.erase(it);
    } else {
      ++it;
    }
  }
  return silent;
}

bool router_state::live(uint64_t replica_id) const {
  auto it = replicas_.find(replica_id);
  return it != replicas_.end() && it->second.state != dead;
}

size_t router_state::live_count() const {
  size_t n = 0;
  for (const auto& [id, r] : replicas_) n += takes_new(r) ? 1 : 0;
  return n;
}

bool router_state::takes_new(const replica& r) const {
  return r.state == ready && (!r.local || cfg_.use_local);
}

// --- requests -------------------------------------------------------------------------------

void router_state::enqueue(admitted_request r, int64_t now_us) {
  const uint64_t id = r.id;
  if (auto old = flights_.find(id); old != flights_.end()) release(old->second);  // ids are unique; keep counts right
  flight f;
  f.original = std::move(r);
  flights_[id] = std::move(f);
  if (place(id, now_us)) return;
  ++refused_;
  if (!unfit_.empty()) fx_.to_streamer.failed.push_back(seq_failed{id, errc::kv_capacity, unfit_});
  else fx_.to_streamer.failed.push_back(
      seq_failed{id, errc::no_replica, "no engine replica is available (" + no_replica_reason() + ")"});
  flights_.erase(id);
}

admitted_request router_state::continuation(const flight& f) const {
  admitted_request r = f.original;
  if (f.delivered.empty()) return r;
  r.prompt.insert(r.prompt.end(), f.delivered.begin(), f.delivered.end());
  const auto n = static_cast<int32_t>(f.delivered.size());
  r.max_tokens = f.original.max_tokens - n;
  r.generated_before = n;
  return r;
}

bool router_state::place(uint64_t id, int64_t /*now_us*/) {
  flight& f = flights_.at(id);
  admitted_request req = continuation(f);

  // Only replicas whose KV memory can hold the whole request (workers' may differ: kv.memory_mib
  // is not a join key); one that cannot would refuse it at once and, so looking idle, draw more.
  unfit_.clear();
  const int64_t tokens = static_cast<int64_t>(req.prompt.size()) + std::max(0, req.max_tokens);
  int64_t largest = 0;
  std::vector<replica*> candidates;
  for (auto& [rid, r] : replicas_) {
    if (!takes_new(r)) continue;
    const int64_t slots = static_cast<int64_t>(r.load.kv_blocks_total) * r.block_size;
    largest = std::max(largest, slots);
    if (r.load.kv_blocks_total > 0 && (tokens + r.block_size - 1) / r.block_size > r.load.kv_blocks_total) continue;
    candidates.push_back(&r);
  }
  if (candidates.empty() && largest > 0)
    unfit_ = "prompt plus max_tokens (" + std::to_string(tokens) + " tokens) needs more KV memory than any replica has (" +
             "the largest holds " + std::to_string(largest) + " token slots); lower max_tokens";
  if (candidates.empty() || !policy_) return false;

  const bool hits = policy_->wants_prefix_hits();
  std::map<int32_t, std::vector<uint64_t>> hashes_by_block_size;  // replicas mostly share one
  std::vector<replica_view> views;
  views.reserve(candidates.size());
  for (replica* r : candidates) {
    replica_view v;
    v.id = r->id;
    v.waiting = r->load.waiting;
    v.running = r->load.running;
    v.queued_tokens = r->queued_tokens;
    v.kv_blocks_available = r->load.kv_blocks_available;
    v.kv_blocks_total = r->load.kv_blocks_total;
    v.max_num_seqs = r->load.max_num_seqs;
    if (hits && !r->prefixes.empty()) {
      auto h = hashes_by_block_size.find(r->block_size);
      if (h == hashes_by_block_size.end())
        h = hashes_by_block_size.emplace(r->block_size, block_hashes(req.prompt, r->block_size)).first;
      v.prefix_hit_tokens = prefix_hit(*r, h->second);
    }
    views.push_back(v);
  }

  route_request rr;
  rr.id = id;
  rr.prompt_tokens = static_cast<int32_t>(req.prompt.size());
  rr.max_tokens = req.max_tokens;
  rr.tenant = req.tenant;
  const std::optional<size_t> pick = policy_->pick(rr, views);
  if (!pick || *pick >= candidates.size()) return false;

  replica& to = *candidates[*pick];
  f.replica = to.id;
  f.charged = static_cast<int64_t>(req.prompt.size()) + std::max(0, req.max_tokens);
  to.queued_tokens += f.charged;
  ++to.in_flight;
  ++to.placed;
  ++placed_;
  remember_prefix(to, req.prompt);
  fx_.place.emplace_back(to.id, std::move(req));
  // A paused stream stays paused on its new replica until the streamer resumes it.
  if (f.paused) fx_.pause.emplace_back(to.id, id);
  return true;
}

void router_state::release(flight& f) {
  auto it = replicas_.find(f.replica);
  if (it == replicas_.end()) return;
  it->second.in_flight = std::max(0, it->second.in_flight - 1);
  it->second.queued_tokens = std::max<int64_t>(0, it->second.queued_tokens - f.charged);
  f.charged = 0;
}

void router_state::drop(uint64_t id) {
  auto it = flights_.find(id);
  if (it == flights_.end()) return;
  fx_.drop.emplace_back(it->second.replica, id);
  release(it->second);
  flights_.erase(it);
}

void router_state::pause(uint64_t id) {
  auto it = flights_.find(id);
  if (it == flights_.end()) return;
  it->second.paused = true;
  fx_.pause.emplace_back(it->second.replica, id);
}

void router_state::resume(uint64_t id) {
  auto it = flights_.find(id);
  if (it == flights_.end()) return;
  it->second.paused = false;
  fx_.resume.emplace_back(it->second.replica, id);
}

void router_state::on_output(uint64_t replica_id, const step_output& o) {
  auto rep = replicas_.find(replica_id);
  std::vector<uint64_t> told;  // ids this call already asked the replica to drop
  const auto owned = [&](uint64_t id) -> flight* {
    auto it = flights_.find(id);
    if (it != flights_.end() && it->second.replica == replica_id && rep != replicas_.end() &&
        rep->second.state != dead)
      return &it->second;
    // Stale: the request moved away (the replica was declared dead), was dropped or ended.
    ++stale_;
    if (std::find(told.begin(), told.end(), id) == told.end()) {
      told.push_back(id);
      fx_.drop.emplace_back(replica_id, id);
    }
    return nullptr;
  };

  for (const auto& t : o.tokens) {
    flight* f = owned(t.id);
    if (!f) continue;
    f->delivered.push_back(t.token);
    ++rep->second.tokens;
    if (f->charged > 0) {
      --f->charged;
      rep->second.queued_tokens = std::max<int64_t>(0, rep->second.queued_tokens - 1);
    }
    fx_.to_streamer.tokens.push_back(t);
  }
  for (const auto& done : o.finished) {
    flight* f = owned(done.id);
    if (!f) continue;
    seq_finished out = done;
    // The whole request's usage, whichever replicas generated it: a continuation's prompt holds
    // the tokens delivered before it moved, which are completion, not prompt.
    out.usage.prompt_tokens = static_cast<int32_t>(f->original.prompt.size());
    out.usage.completion_tokens = static_cast<int32_t>(f->delivered.size());
    out.usage.cached_prompt_tokens = std::min(out.usage.cached_prompt_tokens, out.usage.prompt_tokens);
    // What the replica's prefix cache now holds includes the answer: a chat's next turn starts
    // with it.
    std::vector<int32_t> whole = f->original.prompt;
    whole.insert(whole.end(), f->delivered.begin(), f->delivered.end());
    remember_prefix(rep->second, whole);
    release(*f);
    flights_.erase(done.id);
    fx_.to_streamer.finished.push_back(std::move(out));
  }
  for (const auto& failed : o.failed) {
    flight* f = owned(failed.id);
    if (!f) continue;
    release(*f);
    flights_.erase(failed.id);
    fx_.to_streamer.failed.push_back(failed);
  }
}

void router_state::set_policy(router_config cfg, std::unique_ptr<routing_policy> policy) {
  cfg.numerics = std::move(cfg_.numerics);  // the model and KV settings change only with a restart
  cfg_ = std::move(cfg);
  policy_ = std::move(policy);
}

router_effects router_state::take_effects() {
  router_effects out = std::move(fx_);
  fx_ = router_effects{};
  return out;
}

router_stats router_state::stats() const {
  router_stats s;
  s.policy = policy_ ? policy_->name() : cfg_.policy;
  for (const auto& [id, r] : replicas_) {
    replica_stats rs;
    rs.id = id;
    rs.name = r.name;
    // The front's own replica with cluster.local_replica = false takes no requests.
    rs.state = r.local && !cfg_.use_local && r.state == "ready" ? "standby" : r.state;
    rs.load = r.load;
    rs.in_flight = r.in_flight;
    rs.placed = r.placed;
    rs.tokens = r.tokens;
    s.replicas.push_back(std::move(rs));
  }
  s.placed = placed_;
  s.migrations = migrations_;
  s.replica_deaths = deaths_;
  s.refused_no_replica = refused_;
  s.stale_outputs = stale_;
  if (live_count() == 0) s.no_replica = no_replica_reason();
  return s;
}

// --- prefix summary -------------------------------------------------------------------------

void router_state::remember_prefix(replica& r, const std::vector<int32_t>& tokens) {
  for (uint64_t h : block_hashes(tokens, r.block_size)) {
    auto it = r.prefixes.find(h);
    if (it != r.prefixes.end()) {
      r.prefix_lru.splice(r.prefix_lru.end(), r.prefix_lru, it->second);  // most recent last
      continue;
    }
    r.prefix_lru.push_back(h);
    r.prefixes.emplace(h, std::prev(r.prefix_lru.end()));
    if (r.prefixes.size() > prefix_summary_blocks) {
      r.prefixes.erase(r.prefix_lru.front());
      r.prefix_lru.pop_front();
    }
  }
}

int32_t router_state::prefix_hit(const replica& r, const std::vector<uint64_t>& hashes) {
  int32_t blocks = 0;
  // Chained hashes: block i can only be held with blocks 0..i-1, so the run stops at a miss.
  for (uint64_t h : hashes) {
    if (!r.prefixes.count(h)) break;
    ++blocks;
  }
  return blocks * r.block_size;
}

std::string router_state::no_replica_reason() const {
  if (live_count() > 0) return "the routing policy '" + (policy_ ? policy_->name() : cfg_.policy) + "' chose none";
  int n_draining = 0, n_dead = 0, n_workers = 0;
  bool local = false;
  for (const auto& [id, r] : replicas_) {
    if (r.local) {
      local = true;
    } else {
      ++n_workers;
    }
    if (r.state == draining) ++n_draining;
    if (r.state == dead) ++n_dead;
  }
  std::string why;
  const auto add = [&](const std::string& s) { why += (why.empty() ? "" : "; ") + s; };
  if (n_workers == 0) add("no worker is joined");
  if (n_dead > 0) add(std::to_string(n_dead) + " dead");
  if (n_draining > 0) add(std::to_string(n_draining) + " draining");
  if (local && !cfg_.use_local) add("the front's own replica does not serve (cluster.local_replica = false)");
  if (!local) add("the front runs no replica of its own");
  return why;
}

}  // namespace troupe::actors
