#include "model/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

#include "model/cpu_ops.hpp"

namespace troupe::model {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) for draw number n of a seed.
double uniform(uint64_t seed, int64_t n) {
  uint64_t r = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(n) * 0xd1b54a32d192ed03ull);
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

struct candidate {
  int32_t id;
  float logit;
};

// Rank order: the higher logit first, then the lower id (llama.cpp's and the device's order).
bool ranks_before(const candidate& a, const candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The k candidates that rank first, in rank order, without sorting the vocabulary: one pass keeps
// those above the current k-th best in a small buffer, trimmed back to k when it fills. Ids grow
// along the pass, so a later logit equal to the k-th best never ranks before it and `>` decides.
// A pass over n logits pushes about k ln(n / k) of them (top_k 40 of 49152 logits: ~50 us a row
// with the log-softmax, where partial_sort took ~120 us).
void top_candidates(const float* l, int32_t n, int32_t k, std::vector<candidate>& out) {
  out.clear();
  if (k >= n) {
    for (int32_t i = 0; i < n; ++i) out.push_back({i, l[i]});
    std::sort(out.begin(), out.end(), ranks_before);
    return;
  }
  const size_t cap = std::max<size_t>(4 * static_cast<size_t>(k), 256);
  out.reserve(cap + 1);
  auto trim = [&] {
    std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), ranks_before);
    out.resize(static_cast<size_t>(k));
    return out.back().logit;  // the k-th best: nth_element leaves it last
  };
  for (int32_t i = 0; i < k; ++i) out.push_back({i, l[i]});
  float kth = trim();
  for (int32_t i = k; i < n; ++i) {
    if (l[i] > kth) {
      out.push_back({i, l[i]});
      if (out.size() >= cap) kth = trim();
    }
  }
  if (out.size() > static_cast<size_t>(k)) trim();
  std::sort(out.begin(), out.end(), ranks_before);
}

// Where a draw lands among ranked candidates by the sampler's rule: weights w (unnormalised
// probabilities at the temperature, in rank order) over `mass`, min_p against the first, top_p
// over the cumulative share, then the draw u in [0, 1) over the share that is kept.
size_t pick_ranked(const std::vector<double>& w, double mass, const sampling_params& p, double u) {
  size_t n = w.size();
  if (p.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && w[keep] / mass >= p.min_p * (w[0] / mass)) ++keep;
    n = keep;
  }
  if (p.top_p < 1.0f) {
    double acc = 0.0;
    size_t keep = 0;
    while (keep < n) {
      acc += w[keep++] / mass;
      if (acc >= p.top_p) break;
    }
    n = std::max<size_t>(keep, 1);
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += w[i] / mass;
  double left = u * total;
  for (size_t i = 0; i < n; ++i) {
    left -= w[i] / mass;
    if (left < 0) return i;
  }
  return n - 1;
}

// The whole vocabulary in rank order without sorting it. Logits fall into buckets by their
// distance below the maximum (bucket 0 holds it), the buckets spanning the row's finite range or
// 32 temperatures, whichever is less (the last bucket takes everything lower: weights below
// e^-32), so each bucket is a contiguous run of the ranking with its weight summed in one pass;
// walking the ranking visits the buckets in order and sorts only the one where the running share
// crosses what is looked for. O(n) however flat or peaked the row (only a row of equal logits
// sorts them all).
class ranked_vocabulary {
 public:
  static constexpr int k_buckets = 1024;

  ranked_vocabulary(const float* l, const float* w, int32_t n, float mx, float temperature, double mass)
      : l_(l), w_(w), n_(n), mass_(mass), bucket_of_(static_cast<size_t>(n)) {
    float lo = mx;
    for (int32_t i = 0; i < n; ++i)
      if (l[i] < lo && l[i] > -std::numeric_limits<float>::infinity()) lo = l[i];
    const float range = std::min(mx - lo, 32.0f * std::max(temperature, 1e-30f));
    const float per = range > 0.0f && range < std::numeric_limits<float>::infinity()
                          ? static_cast<float>(k_buckets) / range
                          : 0.0f;
    weight_.assign(k_buckets, 0.0);
    count_.assign(k_buckets, 0);
    for (int32_t i = 0; i < n; ++i) {
      const float d = (mx - l[i]) * per;  // NaN and -inf logits go to the last bucket
      const int b = d < static_cast<float>(k_buckets - 1) ? static_cast<int>(d) : k_buckets - 1;
      bucket_of_[static_cast<size_t>(i)] = static_cast<uint16_t>(b);
      weight_[static_cast<size_t>(b)] += static_cast<double>(w[i]);
      ++count_[static_cast<size_t>(b)];
    }
  }

  // A place in the ranking: bucket, index in the bucket's ranked candidates.
  struct place {
    int bucket = 0;
    size_t index = 0;
  };

  // The first place whose running share (w / mass summed from the top, itself included) reaches
  // `target` (>= when inclusive, else >), walking no further than `limit`; the limit (or the
  // last candidate) when rounding leaves the share short. `share` gets the running share there.
  // The share of every candidate together (1 up to rounding), summed as find() walks.
  double total_share() const {
    double t = 0.0;
    for (double x : weight_) t += x / mass_;
    return t;
  }

  place find(double target, bool inclusive, const place* limit, double* share) {
    double acc = 0.0;
    int last_bucket = -1;  // the last bucket with weight walked past (for the rounding fallback)
    auto reached = [&](double a) { return inclusive ? a >= target : a > target; };
    for (int b = 0; b < k_buckets; ++b) {
      if (count_[static_cast<size_t>(b)] == 0) continue;
      const bool at_limit_bucket = limit && limit->bucket == b;
      const double bucket_share = weight_[static_cast<size_t>(b)] / mass_;
      if (!at_limit_bucket && !reached(acc + bucket_share)) {
        acc += bucket_share;
        if (bucket_share > 0.0) last_bucket = b;
        continue;
      }
      const auto& c = ranked(b);
      for (size_t i = 0; i < c.size(); ++i) {
        acc += static_cast<double>(w_[c[i].id]) / mass_;
        if (reached(acc) || (at_limit_bucket && i == limit->index)) {
          *share = acc;
          return {b, i};
        }
      }
      if (bucket_share > 0.0) last_bucket = b;  // rounding: the bucket's sum reached the target, its elements did not
    }
    *share = acc;
    // Rounding left the share short of the target: the last candidate with any weight (never
    // one of the zero-weight tail).
    if (last_bucket < 0) return {first_bucket(), 0};
    const auto& c = ranked(last_bucket);
    size_t i = c.size() - 1;
    while (i > 0 && !(w_[c[i].id] > 0.0f)) --i;
    return {last_bucket, i};
  }

  int32_t id(const place& p) { return ranked(p.bucket)[p.index].id; }

 private:
  int first_bucket() const {
    int b = 0;
    while (b + 1 < k_buckets && count_[static_cast<size_t>(b)] == 0) ++b;
    return b;
  }

  // Bucket b's candidates in rank order, gathered and sorted on first use.
  const std::vector<candidate>& ranked(int b) {
    auto& c = sorted_[b];
    if (c.empty()) {
      for (int32_t i = 0; i < n_; ++i)
        if (bucket_of_[static_cast<size_t>(i)] == b) c.push_back({i, l_[i]});
      std::sort(c.begin(), c.end(), ranks_before);
    }
    return c;
  }

  const float* l_;
  const float* w_;
  int32_t n_;
  double mass_;
  std::vector<uint16_t> bucket_of_;
  std::vector<double> weight_;
  std::vector<uint32_t> count_;
  std::map<int, std::vector<candidate>> sorted_;
};

}  // namespace

status sampling_params::validate() const {
  if (!(temperature >= 0.0f) || temperature > 100.0f) return make_error("temperature must be in [0, 100]");
  if (top_k < 0) return make_error("top_k must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return make_error("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return make_error("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || repetition_penalty > 10.0f) return make_error("repetition_penalty must be in (0, 10]");
  if (!(std::fabs(frequency_penalty) <= 2.0f)) return make_error("frequency_penalty must be in [-2, 2]");
  if (!(std::fabs(presence_penalty) <= 2.0f)) return make_error("presence_penalty must be in [-2, 2]");
  if (penalty_last_n < 0) return make_error("penalty_last_n must be >= 0");
  if (n_logprobs < 0 || n_logprobs > 20) return make_error("logprobs must be in [0, 20]");
  for (const auto& b : logit_bias) {
    if (b.token < 0) return make_error("logit_bias token ids must be >= 0");
    if (!(std::fabs(b.bias) <= 100.0f)) return make_error("logit_bias values must be in [-100, 100]");
  }
  return {};
}

sample_result sample_token(const float* logits, int32_t n_vocab, const sampling_params& p,
                           const std::vector<int32_t>& recent, int64_t n_generated, bool want_logprob) {
  if (!want_logprob && p.plain_greedy()) {
    sample_result r;
    r.token = static_cast<int32_t>(argmax(logits, n_vocab));  // the first maximum, as below
    r.logprob = std::numeric_limits<float>::quiet_NaN();
    return r;
  }
  // Biases and penalties change a per-thread copy of the logits, reused from call to call (at
  // batch 16 this runs for 16 x n_vocab values every step); without them the logits are read in
  // place. The bias comes first (OpenAI's logit_bias is added to the model's logits), then the
  // penalties; logprobs are of the result. Ids beyond the vocabulary are skipped (the server
  // refuses them before they get here).
  thread_local std::vector<float> copy, e;
  const float* l = logits;
  const bool penalised = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (penalised || !p.logit_bias.empty()) {
    copy.assign(logits, logits + n_vocab);
    for (const auto& b : p.logit_bias)
      if (b.token >= 0 && b.token < n_vocab) copy[static_cast<size_t>(b.token)] += b.bias;
    l = copy.data();
  }
  if (penalised) {
    const size_t n = std::min(recent.size(), static_cast<size_t>(p.penalty_last_n));
    std::unordered_map<int32_t, int> counts;
    for (size_t i = recent.size() - n; i < recent.size(); ++i) ++counts[recent[i]];
    for (const auto& [id, c] : counts) {
      if (id < 0 || id >= n_vocab) continue;
      float& x = copy[static_cast<size_t>(id)];
      if (p.repetition_penalty != 1.0f) x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
      x -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
    }
    l = copy.data();
  }

  // Log-softmax of the penalised logits, for logprobs.
  const auto best = static_cast<int32_t>(argmax(l, n_vocab));  // the first maximum
  const float mx = l[best];
  // Float exp (each term is in (0, 1]) vectorised, summed in double (see exp_sum).
  if (e.size() < static_cast<size_t>(n_vocab)) e.resize(static_cast<size_t>(n_vocab));
  const double z = exp_sum(l, mx, e.data(), n_vocab);
  const float log_z = mx + static_cast<float>(std::log(z));

  sample_result r;
  if (!std::isfinite(mx) || !std::isfinite(z)) {
    // Logits that are not finite (a broken model file: NaN weights): no weight, share or rank
    // of them means anything (NaN breaks the sort's ordering), and a draw over them could find
    // no candidate at all. The first maximum keeps the answer defined; no alternatives.
    r.token = best;
    r.logprob = std::numeric_limits<float>::quiet_NaN();
    return r;
  }
  thread_local std::vector<candidate> c;
  if (p.n_logprobs > 0) {
    top_candidates(l, n_vocab, std::min(p.n_logprobs, n_vocab), c);
    for (const auto& x : c) r.top.push_back({x.id, x.logit - log_z});
  }
  if (p.temperature <= 0.0f) {
    // Greedy; ties go to the lowest id, as in llama.cpp.
    r.token = best;
    r.logprob = mx - log_z;
    return r;
  }
  const double u = uniform(p.seed, n_generated);
  thread_local std::vector<double> w;
  size_t pick = 0;
  if (p.top_k > 0 && p.top_k < n_vocab) {
    // Top-k: the k best, weighed relative to the first (as the device sampler does,
    // gpu/kernel_math.hpp pick_from_sorted).
    top_candidates(l, n_vocab, p.top_k, c);
    w.resize(c.size());
    double sum = 0.0;
    for (size_t i = 0; i < c.size(); ++i) {
      w[i] = std::exp(static_cast<double>(c[i].logit - c[0].logit) / p.temperature);
      sum += w[i];
    }
    pick = pick_ranked(w, sum, p, u);
  } else {
    // The whole vocabulary: weights exp((l - max) / t) for every logit in one vectorised pass
    // (float exps summed in double, as the log-softmax), their sum normalising; then min_p's
    // survivors ranked, or the ranking walked bucket by bucket (ranked_vocabulary).
    thread_local std::vector<float> scaled, et;
    const float* wl = e.data();  // temperature 1: the log-softmax's own exps
    double mass = z;
    if (p.temperature != 1.0f) {
      // (l - max) / t, at most 0; 1/t capped so that a tiny temperature cannot overflow it to
      // inf (and inf - inf to NaN): everything but the maxima then weighs 0.
      const float inv_t = 1.0f / std::max(p.temperature, 1e-30f);
      if (scaled.size() < static_cast<size_t>(n_vocab)) {
        scaled.resize(static_cast<size_t>(n_vocab));
        et.resize(static_cast<size_t>(n_vocab));
      }
      for (int32_t i = 0; i < n_vocab; ++i) scaled[static_cast<size_t>(i)] = (l[i] - mx) * inv_t;
      mass = exp_sum(scaled.data(), 0.0f, et.data(), n_vocab);
      wl = et.data();
    }
    if (p.min_p > 0.0f) {
      // min_p keeps the candidates within a factor of the best: gathered and ranked directly
      // (few, unless the row is flat), then the prefix rule as with top_k.
      const double floor_share = p.min_p * (static_cast<double>(wl[best]) / mass);
      c.clear();
      for (int32_t i = 0; i < n_vocab; ++i)
        if (static_cast<double>(wl[i]) / mass >= floor_share) c.push_back({i, l[i]});
      std::sort(c.begin(), c.end(), ranks_before);
      w.resize(c.size());
      for (size_t i = 0; i < c.size(); ++i) w[i] = static_cast<double>(wl[c[i].id]);
      pick = pick_ranked(w, mass, p, u);
    } else {
      ranked_vocabulary rv(l, wl, n_vocab, mx, p.temperature, mass);
      double kept = rv.total_share();  // the share the draw runs over: everything, or top_p's prefix
      ranked_vocabulary::place cut;
      const bool has_cut = p.top_p < 1.0f;
      if (has_cut) cut = rv.find(p.top_p, true, nullptr, &kept);
      double share = 0.0;
      const auto at = rv.find(u * kept, false, has_cut ? &cut : nullptr, &share);
      r.token = rv.id(at);
      r.logprob = l[r.token] - log_z;
      return r;
    }
  }
  r.token = c[pick].id;
  r.logprob = l[r.token] - log_z;
  return r;
}

}  // namespace troupe::model
