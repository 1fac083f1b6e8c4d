#include "cache/cache_key.hpp"

#include "common/bytes.hpp"

namespace troupe::cache {

namespace {

// Lengths and counts are 64 bits in the keys.
using key_writer = byte_writer<uint64_t>;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

cache_query cache_query::from_messages(const std::vector<message_view>& messages, cache_choice cache) {
  cache_query q;
  q.cache = cache;
  size_t last_user = messages.size();
  for (size_t i = messages.size(); i-- > 0;) {
    if (messages[i].role == "user") {
      last_user = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i == last_user) {
      q.question = messages[i].content;
      q.context += "\x1f[question]\x1e";  // where the question sat among the turns
      continue;
    }
    q.context += messages[i].role;
    q.context += '\x1f';
    q.context += messages[i].content;
    q.context += '\x1e';
  }
  return q;
}

cache_query cache_query::from_prompt(std::string prompt, cache_choice cache) {
  cache_query q;
  q.question = std::move(prompt);
  q.cache = cache;
  return q;
}

std::string normalize_question(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool pending_space = false;
  for (char c : text) {
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

std::string context_key(const cache_query& q, std::string_view context) {
  key_writer k;
  k.str(q.model);
  k.str(context);
  const auto& p = q.sampling;
  k.raw(p.temperature);
  k.raw(p.top_k);
  k.raw(p.top_p);
  k.raw(p.min_p);
  k.raw(p.repetition_penalty);
  k.raw(p.frequency_penalty);
  k.raw(p.presence_penalty);
  k.raw(p.penalty_last_n);
  // Greedy decoding ignores the seed; keying on it would only split identical answers.
  k.raw(p.temperature > 0.0f ? p.seed : uint64_t{0});
  k.raw(q.max_tokens);
  k.raw(static_cast<uint64_t>(q.stop.size()));
  for (const auto& s : q.stop) k.str(s);
  k.raw(static_cast<uint64_t>(q.eog.size()));
  for (int32_t t : q.eog) k.raw(t);
  // Appended after everything above, and only when present, so that a shared, unconstrained
  // query keeps the bytes (and the stored fingerprints) it had before tenants and constraints
  // were keyed. Every field above is length-prefixed, so those older keys are never a prefix of
  // a key with a scope: records stored before scoping (no tenant in their fingerprint) match
  // shared lookups only, never a scoped one.
  if (!q.share_across_tenants) {
    k.raw(uint8_t{'T'});
    k.str(q.tenant);
  }
  if (!q.constraint_kind.empty()) {
    k.raw(uint8_t{'C'});
    k.str(q.constraint_kind);
    k.str(q.constraint_source);
  }
  return k.take();
}

fingerprint context_fingerprint(const cache_query& q) { return fingerprint_of(context_key(q, q.context), 0x636f6e74u); }

fingerprint exact_fingerprint(const fingerprint& context, std::string_view question) {
  key_writer k;
  k.raw(context.hi);
  k.raw(context.lo);
  k.str(question);
  return fingerprint_of(k.bytes(), 0x65786163u);
}

std::string exact_key(const cache_query& q) {
  const std::string_view tokens(reinterpret_cast<const char*>(q.prompt.data()), q.prompt.size() * sizeof(int32_t));
  key_writer k;
  const std::string context = context_key(q, tokens);
  k.append(context.data(), context.size());
  // The exact cache has always told seeds apart (greedy ones too) and reported logprobs from
  // none: kept, so that what it hits does not change.
  k.raw(q.sampling.seed);
  k.raw(q.logprobs);
  return k.take();
}

}  // namespace troupe::cache
