#pragma once
// The router's decisions, without CAF: the replica table (live, draining, dead; last load report;
// when each last reported), which replica owns each request in flight, the tokens passed on for
// each (for migration), and a prefix summary per replica for prefix_affinity. Decisions are
// values: each call records what to send in effects that the thin actor carries out
// (take_effects), in the order they were decided.
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/request.hpp"
#include "actors/router/policy.hpp"
#include "actors/router/router.hpp"
#include "actors/scheduler/step.hpp"

namespace troupe::actors {

struct router_effects {
  // Requests to send to a replica (first: its id), new ones and continuations of migrated ones.
  std::vector<std::pair<uint64_t, admitted_request>> place;
  // Flow control to pass to the owner (first: replica id).
  std::vector<std::pair<uint64_t, uint64_t>> drop, pause, resume;
  // What to pass on to the streamer (tokens, finishes and failures of owned requests only;
  // requests that could not be placed or continued fail here too).
  step_output to_streamer;
  // Log lines worth an info line (a replica died, which requests moved where).
  std::vector<std::string> log;
};

class router_state {
 public:
  router_state(router_config cfg, std::unique_ptr<routing_policy> policy);

  // --- replicas ---------------------------------------------------------------------------
  // The front's own replica (id 0, never silent: the actor polls its scheduler).
  void add_local(int32_t block_size, int64_t now_us);
  // Why a worker computing with `theirs` may not join, naming the first key that differs and
  // both values; empty: it may. The cluster's numerics are the front's own replica's when it
  // serves (cluster.local_replica) and they are known, else those of the workers live now (they
  // agree); with none of either, any worker may join (and sets them for the next).
  std::string numerics_conflict(const replica_numerics& theirs) const;
  // Whether a live replica (ready or draining) is named `name` already, as a line for the log
  // (logs, /health and a reload's not_applied_on_workers name workers by it); empty if none is.
  std::string name_conflict(const std::string& name) const;
  // A worker's replica joined; returns its id (ids are never reused).
  uint64_t add_replica(std::string name, int32_t block_size, int64_t now_us, replica_numerics numerics = {});
  void on_report(uint64_t replica, const load_report& r, int64_t now_us);
  // A replica is leaving: no new requests; it stays live until it has no request in flight.
  void drain(uint64_t replica);
  // The replica is gone (connection down, or silent): its requests continue elsewhere
  // (migration) or, with no replica left, fail with errc::no_replica naming the cause.
  void kill(uint64_t replica, const std::string& why, int64_t now_us);
  // The replica lost its requests but lives on (the local scheduler crashed and was restarted):
  // each continues from the tokens already delivered, placed again like a dead replica's.
  void restarted(uint64_t replica, const std::string& why, int64_t now_us);
  // Kills every replica silent for longer than dead_after_ms; returns their ids. Forgets the
  // replicas dead for longer than dead_kept_us (they leave /health and /metrics).
  std::vector<uint64_t> expire(int64_t now_us);
  bool live(uint64_t replica) const;
  size_t live_count() const;  // live and not draining (can take new requests)

  // --- requests ---------------------------------------------------------------------------
  // Places a request (effects.place), or fails it (effects.to_streamer.failed) when no replica can
  // take it.
  void enqueue(admitted_request r, int64_t now_us);
  // The streamer's flow control, passed to the owner; drop also forgets the request.
  void drop(uint64_t id);
  void pause(uint64_t id);
  void resume(uint64_t id);
  // A replica's output: tokens / finishes / failures of requests it owns are passed on (and
  // recorded); the rest are stale (the request moved or ended) and the replica is told to drop
  // them. Finishes are reported with the request's whole usage (a migrated request's prompt is
  // its original prompt, its completion every token generated on any replica).
  void on_output(uint64_t replica, const step_output& o);

  // A new policy (hot reload); what is in flight stays where it is.
  void set_policy(router_config cfg, std::unique_ptr<routing_policy> policy);

  router_effects take_effects();
  router_stats stats() const;
  const router_config& config() const { return cfg_; }

 private:
  // Prompt block hashes remembered per replica for prefix_affinity's estimate: enough for a
  // few hundred distinct prompts of a few thousand tokens; older ones are forgotten first, as a
  // replica's own prefix cache forgets them.
  static constexpr size_t prefix_summary_blocks = 4096;

 public:
  // How long a dead replica stays listed (state "dead" in /health and /metrics, its counters
  // final) before it is forgotten: long enough for a minute's scrapes to see it go, short enough
  // that a worker restarted now and then (a new id each time) leaves no pile of series.
  static constexpr int64_t dead_kept_us = 60 * 1000 * 1000;

 private:
  struct replica {
    uint64_t id = 0;
    std::string name;
    std::string state = "ready";   // "ready", "draining", "dead"
    int32_t block_size = 16;
    load_report load;
    int64_t last_report_us = 0;
    int64_t died_us = 0;           // when it was declared dead
    bool local = false;
    replica_numerics numerics;     // what it computes with (a worker's, from its hello)
    int32_t in_flight = 0;
    int64_t queued_tokens = 0;
    int64_t placed = 0;
    int64_t tokens = 0;
    // Chained hashes of the block-aligned prompt prefixes sent here (hash of block i covers
    // blocks 0..i, as the engine's prefix cache keys them), least recently used first, bounded
    // by prefix_summary_blocks.
    std::list<uint64_t> prefix_lru;
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> prefixes;
  };
  struct flight {
    admitted_request original;      // as admission let it in
    std::vector<int32_t> delivered; // tokens passed on to the streamer so far
    uint64_t replica = 0;
    bool paused = false;
    int64_t charged = 0;            // this request's share of its replica's queued_tokens
  };

  // The request to send for `f` now: the original, or its continuation after `delivered`.
  admitted_request continuation(const flight& f) const;
  bool place(uint64_t id, int64_t now_us);  // false: no replica (the request failed)
  // Whether replica `r` may take a new request.
  bool takes_new(const replica& r) const;
  // The flight leaves its replica (finished, failed, dropped, or moving): the replica's counts.
  void release(flight& f);
  // Remembers the full blocks of `tokens` as held by `r` (most recently used).
  void remember_prefix(replica& r, const std::vector<int32_t>& tokens);
  // Tokens of `tokens`' leading whole blocks that `r` holds, by its summary.
  static int32_t prefix_hit(const replica& r, const std::vector<uint64_t>& hashes);
  // Places again the requests `ids` that `label` lost (`what` happened to it): finished when
  // everything was delivered, continued elsewhere, or failed with errc::no_replica.
  void continue_lost(std::vector<uint64_t> ids, const std::string& label, const std::string& what, int64_t now_us);
  // Why no replica can take a request, for the failure's message.
  std::string no_replica_reason() const;

  router_config cfg_;
  std::unique_ptr<routing_policy> policy_;
  std::map<uint64_t, replica> replicas_;
  std::string unfit_;  // why the last place() found no replica: none can hold the request (else empty)
  uint64_t next_replica_ = 1;
  std::unordered_map<uint64_t, flight> flights_;
  router_effects fx_;
  int64_t placed_ = 0, migrations_ = 0, deaths_ = 0, refused_ = 0, stale_ = 0;
};

}  // namespace troupe::actors
