#include "model/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
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
  // Penalties change a per-thread copy of the logits, reused from call to call (at batch 16 this
  // runs for 16 x n_vocab values every step); without them the logits are read in place.
  thread_local std::vector<float> copy, e;
  const float* l = logits;
  if (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    copy.assign(logits, logits + n_vocab);
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
  if (p.n_logprobs > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
    std::iota(idx.begin(), idx.end(), 0);
    const auto k = std::min<size_t>(static_cast<size_t>(p.n_logprobs), idx.size());
    std::partial_sort(idx.begin(), idx.begin() + static_cast<long>(k), idx.end(),
                      [&](int32_t a, int32_t b) {
                        const float la = l[a], lb = l[b];
                        return la > lb || (la == lb && a < b);
                      });
    for (size_t i = 0; i < k; ++i) r.top.push_back({idx[i], l[idx[i]] - log_z});
  }

  if (p.temperature <= 0.0f) {
    // Greedy; ties go to the lowest id, as in llama.cpp.
    r.token = best;
    r.logprob = mx - log_z;
    return r;
  }

  std::vector<candidate> c(static_cast<size_t>(n_vocab));
  for (int32_t i = 0; i < n_vocab; ++i) c[static_cast<size_t>(i)] = {i, l[i]};
  auto by_logit = [](const candidate& a, const candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  size_t n = c.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::partial_sort(c.begin(), c.begin() + p.top_k, c.end(), by_logit);
    n = static_cast<size_t>(p.top_k);
  } else {
    std::sort(c.begin(), c.end(), by_logit);
  }
  // Probabilities at the requested temperature over the kept candidates.
  std::vector<double> pr(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    pr[i] = std::exp(static_cast<double>(c[i].logit - c[0].logit) / p.temperature);
    sum += pr[i];
  }
  for (auto& x : pr) x /= sum;
  if (p.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && pr[keep] >= p.min_p * pr[0]) ++keep;
    n = keep;
  }
  if (p.top_p < 1.0f) {
    double acc = 0.0;
    size_t keep = 0;
    while (keep < n) {
      acc += pr[keep++];
      if (acc >= p.top_p) break;
    }
    n = std::max<size_t>(keep, 1);
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += pr[i];
  double u = uniform(p.seed, n_generated) * total;
  size_t pick = n - 1;
  for (size_t i = 0; i < n; ++i) {
    u -= pr[i];
    if (u < 0) {
      pick = i;
      break;
    }
  }
  r.token = c[pick].id;
  r.logprob = l[r.token] - log_z;
  return r;
}

}  // namespace troupe::model
