#include "net/detail/prompt_reader.hpp"

#include <limits>
#include <string>

namespace troupe::net::detail {

namespace dom = simdjson::dom;

namespace {

bool token_ids(dom::array a, std::vector<int32_t>& out) {
  for (dom::element x : a) {
    int64_t v = 0;
    if (x.get(v) != simdjson::SUCCESS || v < 0 || v > std::numeric_limits<int32_t>::max()) return false;
    out.push_back(static_cast<int32_t>(v));
  }
  return !out.empty();
}

// Several prompts: an array of two or more whose first is not a number ([ids] is one prompt).
bool is_batch(const dom::element& p) {
  return p.is_array() && dom::array(p).size() > 1 && !dom::array(p).at(0).is_number();
}

}  // namespace

void read_prompt(reader& r, actors::request_spec& s, bool& seen) {
  auto e = r.get("prompt");
  if (!e) return;
  seen = true;
  dom::element p = *e;
  if (p.is_array() && dom::array(p).size() == 1 && !dom::array(p).at(0).is_number()) p = dom::array(p).at(0);  // [x]
  if (p.is_string()) {
    s.prompt = std::string(std::string_view(p));
  } else if (!p.is_array()) {
    return r.wrong("prompt", "a string, an array of one string or token ids", *e);
  } else if (!token_ids(dom::array(p), s.prompt_tokens)) {
    s.prompt_tokens.clear();
    const bool batch = is_batch(p);
    r.err = bad_request(batch ? "'prompt' holds several prompts: a batch is not served here, send one per request"
                              : "'prompt' must be a string, an array of one string, or token ids ([ids] or [[ids]]: "
                                "integers from 0, at least one)",
                        "prompt", batch ? "unsupported_field" : "invalid_request");
  }
  // Nothing to continue: the model has no start token to generate from (SmolLM2 has no BOS).
  if (!r.err && s.prompt.empty() && s.prompt_tokens.empty()) r.err = bad_request("'prompt' must not be empty", "prompt");
}

void read_prompts(reader& r, actors::request_spec& s, std::vector<prompt_input>& batch, bool& seen) {
  batch.clear();
  auto e = r.get("prompt");
  if (!e || !is_batch(*e)) return read_prompt(r, s, seen);
  seen = true;
  size_t i = 0;
  for (dom::element x : dom::array(*e)) {
    const std::string at = "prompt[" + std::to_string(i++) + "]";
    prompt_input in;
    if (x.is_string()) {
      in.text = std::string(std::string_view(x));
      if (in.text.empty()) r.err = bad_request("'" + at + "' must not be empty", at);
    } else if (!x.is_array() || !token_ids(dom::array(x), in.tokens)) {
      r.err = bad_request("'" + at + "' must be a string or token ids (integers from 0, at least one)", at);
    }
    if (r.err) return;
    batch.push_back(std::move(in));
  }
  s.prompt = batch.front().text;
  s.prompt_tokens = batch.front().tokens;
}

}  // namespace troupe::net::detail
