#pragma once
// A scheduling policy is an object the scheduler consults; it never mutates scheduler state.
// It answers three questions: in which order are sequences served (waiting ones joining the
// batch, and running ones keeping their place when KV memory runs short), may new sequences
// join the running batch now (and this one in particular, and up to how many), and may a
// waiting sequence preempt a running one. After each step it hears how the step went
// (on_step), which is how a policy adapts; that hook changes the policy's own state only.
//
// Policies register by name in a registry (a duplicate name is an error; an unknown name lists
// the known ones), and the scheduler's config names one. The built-ins live in policies/.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/named_registry.hpp"
#include "common/result.hpp"

namespace troupe::actors {

// What a policy may look at of a sequence: plain numbers, no pointers into scheduler state.
struct seq_view {
  uint64_t id = 0;
  int64_t arrival_us = 0;      // admission time (steady clock)
  int32_t priority = 0;        // request field; higher is more important
  int32_t prompt_tokens = 0;
  int32_t generated = 0;       // tokens generated so far (known or in flight)
  int32_t max_tokens = 0;
  int32_t to_compute = 0;      // tokens whose KV must still be computed before the next sample
  std::string tenant;          // admission's tenant ("default" when the request named none)
};

// The running batch, as admission of new sequences sees it.
struct batch_view {
  int32_t n_running = 0;       // sequences holding KV (running or paused)
  int32_t n_decoding = 0;      // of those, how many have produced a token
  int32_t n_waiting = 0;       // sequences queued
  int64_t waited_us = 0;       // how long the longest-waiting one has waited
  int32_t max_num_seqs = 0;    // the limit in force (scheduling_policy::max_num_seqs)
};

// How one step went, as the scheduler saw it when the executor's answer arrived.
struct step_feedback {
  int64_t now_us = 0;
  // The step's wall time as a decoding stream sees it (its inter-token latency): from the step's
  // plan, or from the previous step's answer when that came later (steps run one after another),
  // to this answer.
  int64_t latency_us = 0;
  int64_t forward_us = 0;      // of that, time inside the backend
  int32_t n_seqs = 0;          // sequences in the step
  int32_t n_tokens = 0;        // tokens fed (prompt chunks and decodes)
  int32_t n_running = 0;       // sequences holding KV after the step
  int32_t n_waiting = 0;       // sequences queued after the step
  int32_t max_num_seqs = 0;    // the configured limit (scheduler_config::max_num_seqs)
  double kv_free = 1.0;        // fraction of KV blocks free or evictable after the step
  // Tokens fed in the step per tenant (prompt chunks and decodes; padding not counted), for
  // policies that share the engine between tenants.
  std::map<std::string, int32_t> tenant_tokens;
};

class scheduling_policy {
 public:
  virtual ~scheduling_policy() = default;
  virtual std::string name() const = 0;
  // A strict weak order: true when `a` is served before `b` at time `now_us`. The last running
  // sequence in this order is the first preempted when KV blocks run out.
  virtual bool before(const seq_view& a, const seq_view& b, int64_t now_us) const = 0;
  // Whether waiting sequences may join the batch now.
  virtual bool admits_new(const batch_view&) const { return true; }
  // Whether `waiting` may take the batch slot or the KV blocks of `running`.
  virtual bool may_preempt(const seq_view& /*waiting*/, const seq_view& /*running*/) const { return false; }
  // Whether the batch is dense, as in classic static batching on an accelerator: a member that
  // finishes early keeps its slot and keeps being computed (its output discarded) until the
  // batch's last member finishes. Its stream still ends on time.
  virtual bool pads_finished() const { return false; }
  // The batch size limit in force, given the configured max_num_seqs; the scheduler keeps it
  // within [1, configured]. Lowering it preempts nobody: running sequences go on, and waiting
  // ones join only while fewer than the limit hold KV.
  virtual int32_t max_num_seqs(int32_t configured) const { return configured; }
  // Asked for each waiting `candidate` in order, once admits_new() said yes: whether it may join
  // a batch whose members (sequences holding KV, including those admitted earlier in this plan)
  // have prompts of `member_prompts` tokens. A refused candidate is skipped; later ones may join.
  // The batch_view is the one admits_new() saw, from before this plan admitted anyone.
  virtual bool admits(const seq_view& /*candidate*/, const batch_view&, const std::vector<int32_t>& /*member_prompts*/,
                      int64_t /*now_us*/) const {
    return true;
  }
  // After each step the executor answered (not after a failed one). The one non-const hook: a
  // policy may adapt its own state from it, never the scheduler's.
  virtual void on_step(const step_feedback&) {}
};

// Numeric knobs of a policy, by name (e.g. "aging_tokens_per_s" for sjf). A policy documents
// the keys it reads where it is defined; keys it does not know make its factory fail.
struct policy_options {
  std::map<std::string, double> values;
  double get(const std::string& key, double fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
};

using policy_factory = std::function<result<std::unique_ptr<scheduling_policy>>(const policy_options&)>;

// The process-wide registry of scheduling policies, holding the built-ins (policies/) from its
// first use. A program adds its own with scheduling_policy_registry().add(...) before it starts a
// pipeline; plugins through their host (plugin_api.hpp).
named_registry<policy_factory>& scheduling_policy_registry();

// Checks `options` only holds keys from `known`; the error names the first stranger and the
// policy's keys.
status check_policy_keys(const std::string& policy, const policy_options& options,
                         const std::vector<std::string>& known);

namespace policies {
// Defined in policies/*.cpp; called by scheduling_policy_registry().
void add_fcfs(named_registry<policy_factory>& r);
void add_priority(named_registry<policy_factory>& r);
void add_sjf(named_registry<policy_factory>& r);
void add_static(named_registry<policy_factory>& r);
void add_adaptive(named_registry<policy_factory>& r);
void add_window(named_registry<policy_factory>& r);
void add_bucketed(named_registry<policy_factory>& r);
}  // namespace policies

}  // namespace troupe::actors
