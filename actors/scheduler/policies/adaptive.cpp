// `adaptive`: continuous batching (fcfs order) whose batch size limit follows the measured step
// latency. A decoding stream gets one token per engine step, so its inter-token latency is the
// step's wall time, and a step takes longer the more sequences it carries. This policy lowers the
// effective max_num_seqs while steps are slower than `target_itl_ms` and raises it while they are
// faster, within [min_num_seqs, the configured max_num_seqs]. It also lowers it when KV memory
// runs short, before preemptions start (each one recomputes a whole sequence).
//
// The controller is AIMD, sampled once per window: a window gathers at least `min_steps` steps and
// spans at least `hold_ms`; then, on the window's mean step latency and the lowest free KV
// fraction any of its steps saw, it decides once:
//   - shrink when the mean is above target * (1 + dead_band), or free KV fell below
//     `kv_low_free`: the limit becomes `decrease` times the most sequences that held KV in the
//     window (at least one less than the limit);
//   - grow by `increase` when the mean is below target * (1 - dead_band), free KV stayed at or
//     above `kv_high_free`, and the limit was binding (at some step as many sequences held KV
//     as it allows while others waited);
//   - otherwise hold.
// A latency cut is skipped when it would not help. The policy fits the latency of decode-only
// steps (one token per sequence, no prompt chunks) against their number of sequences: least
// squares, recent steps weighted most, kept from the last time the batch size varied enough to
// tell (a steady batch tells nothing). When a cautious reading of that model (its slope less
// two standard errors) says the cut would shorten steps by less than 5%, the steps are slow for
// another reason (long contexts, a busy machine, a memory-bound backend whose steps cost the
// same for 1 or 32 sequences) and a smaller batch would only cost throughput. Cuts are made as
// plain AIMD while there is no model, and when the model no longer predicts this window's
// decode steps within the dead band (the backend changed: the model is then learnt anew). So a
// target the backend cannot meet lowers the limit only as far as that buys latency, and never
// below min_num_seqs.
// Why it does not oscillate:
//   - inside the dead band nothing changes, and one additive step moves the latency less than
//     the band is wide (choose dead_band so that 2 * dead_band * target exceeds what one more
//     sequence adds to a step);
//   - a window's evidence is averaged over many steps, and gathered after the previous change;
//   - a cut counts only once it is in force: lowering the limit preempts nobody, so while more
//     sequences than the limit still hold KV (finishing their answers) the slow steps measure the
//     old batch and the controller holds instead of cutting again;
//   - it grows only when the limit is what holds requests back, so idle time does not wind it up;
//   - KV pressure has hysteresis: shrink below kv_low_free, grow only above kv_high_free.
//
// Options:
//   target_itl_ms  (default 100) step latency (inter-token latency) to hold; > 0.
//   dead_band      (default 0.2) relative band around the target in which the limit holds; 0..0.9.
//   hold_ms        (default 500) the shortest window, so the least time between two changes; >= 0.
//   min_steps      (default 8) the fewest steps a window averages; whole, >= 1.
//   decrease       (default 0.75) multiplicative decrease; 0 < decrease < 1.
//   increase       (default 1) additive increase, sequences; whole, >= 1.
//   min_num_seqs   (default 1) the limit never goes below this (nor above the configured one);
//                  whole, >= 1.
//   kv_low_free    (default 0.05) shrink when the free (or evictable) KV fraction drops below; 0..1.
//   kv_high_free   (default 0.2) grow only while it stays at or above this; kv_low_free..1.
#include <algorithm>
#include <cmath>
#include <optional>

#include "actors/scheduler/policy.hpp"

namespace troupe::actors::policies {
namespace {

struct adaptive_options {
  double target_us, dead_band, decrease, kv_low, kv_high;
  int64_t hold_us;
  int32_t min_steps, increase, min_seqs;
};

class adaptive final : public scheduling_policy {
 public:
  explicit adaptive(adaptive_options o) : o_(o) {}
  std::string name() const override { return "adaptive"; }
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    return a.arrival_us != b.arrival_us ? a.arrival_us < b.arrival_us : a.id < b.id;
  }
  int32_t max_num_seqs(int32_t configured) const override {
    return limit_ > 0 ? std::min(limit_, configured) : configured;
  }

  void on_step(const step_feedback& f) override {
    const int32_t cap = std::max(1, f.max_num_seqs);
    const int32_t lowest = std::min(o_.min_seqs, cap);
    limit_ = std::clamp(limit_ > 0 ? limit_ : cap, lowest, cap);
    if (n_ == 0) {
      start_us_ = f.now_us - f.latency_us;
      sum_us_ = 0;
      decode_seqs_ = decode_us_ = 0;
      decode_steps_ = 0;
      kv_min_ = 1.0;
      max_running_ = 0;
      binding_ = false;
    }
    sum_us_ += static_cast<double>(f.latency_us);
    ++n_;
    if (f.n_seqs > 0 && f.n_tokens == f.n_seqs) {
      fit_.add(f.n_seqs, static_cast<double>(f.latency_us));
      if (auto m = fit_.model()) model_ = m;
      decode_seqs_ += f.n_seqs;
      decode_us_ += static_cast<double>(f.latency_us);
      ++decode_steps_;
    }
    kv_min_ = std::min(kv_min_, f.kv_free);
    max_running_ = std::max(max_running_, f.n_running);
    binding_ = binding_ || (f.n_running >= limit_ && f.n_waiting > 0);
    if (n_ < o_.min_steps || f.now_us - start_us_ < o_.hold_us) return;

    const double mean = sum_us_ / n_;
    n_ = 0;  // the next step opens a new window
    const bool slow = mean > o_.target_us * (1 + o_.dead_band);
    const bool fast = mean < o_.target_us * (1 - o_.dead_band);
    if (slow || kv_min_ < o_.kv_low) {
      if (max_running_ > limit_) return;  // the last cut is not in force yet: the batch is still draining
      const auto proportional = static_cast<int32_t>(std::floor(std::max(1, max_running_) * o_.decrease));
      const int32_t cut = std::max(lowest, std::min(limit_ - 1, proportional));
      if (kv_min_ >= o_.kv_low && model_ && decode_steps_ > 0) {
        const double seqs = decode_seqs_ / decode_steps_, seen = decode_us_ / decode_steps_;
        if (std::abs(seen - model_->at(seqs)) <= std::max(0.1, o_.dead_band) * seen) {
          if (model_->cautious_slope * (max_running_ - cut) < 0.05 * seen) return;  // the cut would not help
        } else {
          fit_ = line_fit{};  // the backend changed: learn it anew, from steps after this cut
          model_.reset();
        }
      }
      limit_ = cut;
    } else if (fast && kv_min_ >= o_.kv_high && binding_) {
      limit_ = std::min(cap, limit_ + o_.increase);
    }
  }

 private:
  // Step latency against sequences per step, least squares with exponential forgetting.
  struct line_fit {
    static constexpr double keep = 0.98;  // per step: the last ~50 steps count
    double w = 0, x = 0, y = 0, xx = 0, xy = 0, yy = 0;
    void add(double xi, double yi) {
      w = w * keep + 1;
      x = x * keep + xi;
      y = y * keep + yi;
      xx = xx * keep + xi * xi;
      xy = xy * keep + xi * yi;
      yy = yy * keep + yi * yi;
    }
    struct line {
      double intercept, slope, cautious_slope;  // cautious: less two standard errors
      double at(double n) const { return intercept + slope * n; }
    };
    // Nothing while the batch size has hardly varied (a standard deviation under one sequence).
    std::optional<line> model() const {
      if (w < 8) return std::nullopt;
      const double mx = x / w, my = y / w;
      const double var_x = xx / w - mx * mx, cov = xy / w - mx * my, var_y = yy / w - my * my;
      if (var_x < 1.0) return std::nullopt;
      const double b = cov / var_x;
      const double residual = std::max(0.0, var_y - b * cov);
      return line{my - b * mx, b, b - 2 * std::sqrt(residual / (w * var_x))};
    }
  };

  adaptive_options o_;
  line_fit fit_;                                // of decode-only steps
  std::optional<line_fit::line> model_;         // the last one the fit could tell
  int32_t limit_ = 0;  // 0: no step seen yet, the configured limit holds
  // The current window.
  int32_t n_ = 0;
  int64_t start_us_ = 0;
  double sum_us_ = 0;
  double kv_min_ = 1.0;
  int32_t max_running_ = 0;
  bool binding_ = false;
  double decode_seqs_ = 0, decode_us_ = 0;  // sums over the window's decode-only steps
  int32_t decode_steps_ = 0;
};

bool whole(double x) { return std::floor(x) == x; }

}  // namespace

void add_adaptive(named_registry<policy_factory>& r) {
  (void)r.add("adaptive", [](const policy_options& o) -> result<std::unique_ptr<scheduling_policy>> {
    if (auto s = check_policy_keys("adaptive", o,
                                   {"target_itl_ms", "dead_band", "hold_ms", "min_steps", "decrease", "increase",
                                    "min_num_seqs", "kv_low_free", "kv_high_free"});
        !s)
      return make_error(s.error());
    const double target = o.get("target_itl_ms", 100.0), band = o.get("dead_band", 0.2);
    const double hold = o.get("hold_ms", 500.0), min_steps = o.get("min_steps", 8.0);
    const double decrease = o.get("decrease", 0.75), increase = o.get("increase", 1.0);
    const double min_seqs = o.get("min_num_seqs", 1.0);
    const double kv_low = o.get("kv_low_free", 0.05), kv_high = o.get("kv_high_free", 0.2);
    if (!(target > 0 && target <= 600000)) return make_error("adaptive: target_itl_ms must be within (0, 600000]");
    if (!(band >= 0 && band <= 0.9)) return make_error("adaptive: dead_band must be within 0..0.9");
    if (!(hold >= 0 && hold <= 3.6e6)) return make_error("adaptive: hold_ms must be within 0..3600000");
    if (!(min_steps >= 1 && min_steps <= 1e6 && whole(min_steps)))
      return make_error("adaptive: min_steps must be a whole number within 1..1000000");
    if (!(decrease > 0 && decrease < 1)) return make_error("adaptive: decrease must be within (0, 1)");
    if (!(increase >= 1 && increase <= 1e6 && whole(increase)))
      return make_error("adaptive: increase must be a whole number within 1..1000000");
    if (!(min_seqs >= 1 && min_seqs <= 1e6 && whole(min_seqs)))
      return make_error("adaptive: min_num_seqs must be a whole number within 1..1000000");
    if (!(kv_low >= 0 && kv_low <= 1)) return make_error("adaptive: kv_low_free must be within 0..1");
    if (!(kv_high >= kv_low && kv_high <= 1))
      return make_error("adaptive: kv_high_free must be within kv_low_free..1 (the gap is the hysteresis)");
    adaptive_options a;
    a.target_us = target * 1000;
    a.dead_band = band;
    a.hold_us = static_cast<int64_t>(hold * 1000);
    a.min_steps = static_cast<int32_t>(min_steps);
    a.decrease = decrease;
    a.increase = static_cast<int32_t>(increase);
    a.min_seqs = static_cast<int32_t>(min_seqs);
    a.kv_low = kv_low;
    a.kv_high = kv_high;
    return std::unique_ptr<scheduling_policy>(new adaptive(a));
  });
}

}  // namespace troupe::actors::policies
