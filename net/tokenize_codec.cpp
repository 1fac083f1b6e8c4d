#include "net/tokenize_codec.hpp"

#include <limits>

#include "net/detail/request_reader.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {

namespace dom = simdjson::dom;
using detail::reader;

parsed_tokenize parse_tokenize_request(std::string_view body) {
  parsed_tokenize out;
  dom::object obj;
  if (!detail::parse_object(body, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  tokenize_query q;
  if (!r.get("content") && !r.err) r.err = bad_request("'content' is required", "content");
  detail::known_fields(r, {"content", "add_special", "parse_special", "with_pieces"});
  r.str("content", q.content);
  r.boolean("add_special", q.add_special);
  r.boolean("parse_special", q.parse_special);
  r.boolean("with_pieces", q.with_pieces);
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  out.query = std::move(q);
  return out;
}

parsed_detokenize parse_detokenize_request(std::string_view body) {
  parsed_detokenize out;
  dom::object obj;
  if (!detail::parse_object(body, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  detail::known_fields(r, {"tokens"});
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  auto e = r.get("tokens");
  if (!e) {
    out.error = bad_request("'tokens' is required", "tokens");
    return out;
  }
  if (!e->is_array()) {
    r.wrong("tokens", "an array of token ids", *e);
    out.error = *r.err;
    return out;
  }
  std::vector<int32_t> ids;
  size_t i = 0;
  for (dom::element x : dom::array(*e)) {
    const std::string at = "tokens[" + std::to_string(i++) + "]";
    if (!x.is_int64()) {
      out.error = bad_request("'" + at + "' must be a token id (an integer)", at);
      return out;
    }
    const int64_t v = int64_t(x);
    if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
      out.error = bad_request("'" + at + "' = " + std::to_string(v) + " is not a token id of this model", at);
      return out;
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  out.tokens = std::move(ids);
  return out;
}

std::string tokenize_json(const tokenized& t) {
  json_writer w;
  w.begin_object().key("tokens").begin_array();
  const bool pieces = !t.pieces.empty() && t.pieces.size() == t.tokens.size();
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    if (!pieces) {
      w.value(t.tokens[i]);
      continue;
    }
    w.begin_object().field("id", t.tokens[i]).key("piece");
    const std::string& p = t.pieces[i];
    if (is_valid_utf8(p)) {
      w.value(p);
    } else {
      w.begin_array();
      for (unsigned char c : p) w.value(static_cast<int64_t>(c));
      w.end_array();
    }
    w.end_object();
  }
  w.end_array().end_object();
  return w.take();
}

std::string detokenize_json(std::string_view content) {
  json_writer w;
  w.begin_object().field("content", content).end_object();
  return w.take();
}

}  // namespace troupe::net
