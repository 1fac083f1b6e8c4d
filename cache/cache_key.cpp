#include "cache/cache_key.hpp"

namespace troupe::cache {

namespace {

class key_writer {
 public:
  template <class T>
  void raw(const T& v) {
    s_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(std::string_view v) {
    raw(static_cast<uint64_t>(v.size()));
    s_.append(v.data(), v.size());
  }
  const std::string& bytes() const { return s_; }

 private:
  std::string s_;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

cache_query cache_query::from_messages(const std::vector<actors::chat_message>& messages, bool cache_requested) {
  cache_query q;
  q.cache_requested = cache_requested;
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

cache_query cache_query::from_prompt(std::string prompt, bool cache_requested) {
  cache_query q;
  q.question = std::move(prompt);
  q.cache_requested = cache_requested;
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

fingerprint context_fingerprint(const actors::admitted_request& r, std::string_view context) {
  key_writer k;
  k.str(r.model);
  k.str(context);
  const auto& p = r.sampling;
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
  k.raw(r.max_tokens);
  k.raw(static_cast<uint64_t>(r.stop.size()));
  for (const auto& s : r.stop) k.str(s);
  k.raw(static_cast<uint64_t>(r.eog.size()));
  for (int32_t t : r.eog) k.raw(t);
  return fingerprint_of(k.bytes(), 0x636f6e74u);
}

fingerprint exact_fingerprint(const fingerprint& context, std::string_view normalized_question) {
  key_writer k;
  k.raw(context.hi);
  k.raw(context.lo);
  k.str(normalized_question);
  return fingerprint_of(k.bytes(), 0x65786163u);
}

}  // namespace troupe::cache
