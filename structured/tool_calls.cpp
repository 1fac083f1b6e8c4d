#include "structured/tool_calls.hpp"

#include <simdjson.h>

#include <algorithm>

#include "structured/json_schema.hpp"

namespace troupe::structured {

namespace {

constexpr std::string_view hermes_open = "<tool_call>";
constexpr std::string_view hermes_close = "</tool_call>";
constexpr std::string_view mistral_marker = "[TOOL_CALLS]";
constexpr std::string_view llama3_tag = "<|python_tag|>";

// JSON string contents, escaped (the tool texts are short; json_writer lives in net/, above us).
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return out;
}

std::string params_or_empty(const std::string& p) { return p.empty() ? std::string("{\"type\": \"object\", \"properties\": {}}") : p; }

// The schema a call's arguments are held to. They are a JSON object whatever the schema says: one
// without a top-level `type` (`{}`, only a `description`) constrains an object, as OpenAI reads it
// (and the request reader, which refuses another top-level type), so the grammar says so too; an
// openai-agents tool with `{}` got arguments "0" before.
std::string object_params(const std::string& p) {
  if (p.empty()) return params_or_empty(p);
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  if (parser.parse(p).get(e) != simdjson::SUCCESS || !e.is_object() ||
      simdjson::dom::object(e)["type"].error() == simdjson::SUCCESS)
    return p;
  const std::string rest = p.substr(p.find('{') + 1);
  if (rest.find_first_not_of(" \t\r\n}") == std::string::npos) return "{\"type\": \"object\"}";
  return "{\"type\": \"object\", " + rest;
}

std::string args_or_empty(const std::string& a) { return a.empty() ? std::string("{}") : a; }

const char* args_key(tool_format f) { return f == tool_format::llama3 ? "parameters" : "arguments"; }

std::string one_call(tool_format f, const function_call& c) {
  return "{\"name\": " + json_string(c.name) + ", \"" + args_key(f) + "\": " + args_or_empty(c.arguments) + "}";
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The longest suffix of `s` that is a proper prefix of `marker` (text that may yet become it).
size_t held_back(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// After `key` (a quoted JSON key) and its colon in buf from `from`: where the value starts, or npos
// while it has not arrived.
size_t value_after_key(const std::string& buf, std::string_view key, size_t from = 0) {
  size_t k = buf.find(key, from);
  if (k == std::string::npos) return std::string::npos;
  size_t i = k + key.size();
  while (i < buf.size() && is_space(buf[i])) ++i;
  if (i >= buf.size() || buf[i] != ':') return std::string::npos;
  ++i;
  while (i < buf.size() && is_space(buf[i])) ++i;
  return i < buf.size() ? i : std::string::npos;
}

}  // namespace

const char* to_string(tool_format f) {
  switch (f) {
    case tool_format::hermes: return "hermes";
    case tool_format::llama3: return "llama3";
    case tool_format::mistral: return "mistral";
  }
  return "?";
}

std::string tools_prompt(tool_format f, const std::vector<tool_def>& tools) {
  std::string list;
  for (const auto& t : tools) {
    std::string fn = "{\"type\": \"function\", \"function\": {\"name\": " + json_string(t.name);
    if (!t.description.empty()) fn += ", \"description\": " + json_string(t.description);
    fn += ", \"parameters\": " + params_or_empty(t.parameters) + "}}";
    list += fn;
    list += '\n';
  }
  switch (f) {
    case tool_format::hermes:
      return "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
             list +
             "</tools>\n\nFor each function call, return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
             "<args-json-object>}\n</tool_call>";
    case tool_format::llama3:
      return "You have access to the following functions. To call a function, respond with a JSON object of the "
             "form {\"name\": function name, \"parameters\": dictionary of argument name and its value}. Do not "
             "use variables.\n\n" +
             list;
    case tool_format::mistral:
      return "[AVAILABLE_TOOLS] [" + list.substr(0, list.empty() ? 0 : list.size() - 1) + "][/AVAILABLE_TOOLS]";
  }
  return list;
}

std::string calls_text(tool_format f, const std::vector<function_call>& calls) {
  std::string out;
  switch (f) {
    case tool_format::hermes:
      for (size_t i = 0; i < calls.size(); ++i) {
        if (i) out += '\n';
        out += std::string(hermes_open) + "\n" + one_call(f, calls[i]) + "\n" + std::string(hermes_close);
      }
      return out;
    case tool_format::llama3:
      for (size_t i = 0; i < calls.size(); ++i) out += (i ? "\n" : "") + one_call(f, calls[i]);
      return out;
    case tool_format::mistral:
      out = std::string(mistral_marker) + "[";
      for (size_t i = 0; i < calls.size(); ++i) out += (i ? ", " : "") + one_call(f, calls[i]);
      return out + "]";
  }
  return out;
}

std::string tool_result_text(tool_format f, std::string_view content) {
  switch (f) {
    case tool_format::hermes: return "<tool_response>\n" + std::string(content) + "\n</tool_response>";
    case tool_format::llama3: return std::string(content);
    case tool_format::mistral: return "[TOOL_RESULTS] " + std::string(content) + "[/TOOL_RESULTS]";
  }
  return std::string(content);
}

std::pair<std::string_view, std::string_view> call_markers(tool_format f) {
  if (f == tool_format::hermes) return {hermes_open, hermes_close};
  return {};
}

const char* tool_result_role(tool_format f) { return f == tool_format::llama3 ? "ipython" : "user"; }

result<std::string> calls_grammar(tool_format f, const std::vector<tool_def>& tools, std::string_view only, bool many,
                                  std::string_view root) {
  const std::string top = std::string(root) + " ::= ";
  std::string rules;
  std::string alts;
  int n = 0;
  for (const auto& t : tools) {
    if (!only.empty() && t.name != only) continue;
    const std::string rule = "fn" + std::to_string(n++);
    auto args = json_schema_to_gbnf(object_params(t.parameters), rule + "-args");
    if (!args) return make_error("tools: the parameters of function '" + t.name + "': " + args.error());
    rules += *args;
    rules += '\n';
    rules += rule + " ::= " + gbnf_literal("{\"name\": " + json_string(t.name) + ", \"" + args_key(f) + "\": ") + " " +
             rule + "-args " + gbnf_literal("}") + "\n";
    alts += (alts.empty() ? "" : " | ") + rule;
  }
  if (n == 0) return make_error("tools: no function named '" + std::string(only) + "' among the tools");
  std::string call;
  switch (f) {
    case tool_format::hermes:
      call = "call ::= " + gbnf_literal(std::string(hermes_open) + "\n") + " (" + alts + ") " +
             gbnf_literal("\n" + std::string(hermes_close)) + "\n";
      rules += call + top + (many ? "call (\"\\n\" call)*\n" : "call\n");
      break;
    case tool_format::llama3:
      rules += top + alts + "\n";
      break;
    case tool_format::mistral:
      rules += "call ::= " + alts + "\n";
      rules += top + gbnf_literal(std::string(mistral_marker) + "[") + " call" +
               (many ? " (\", \" call)*" : "") + " " + gbnf_literal("]") + "\n";
      break;
  }
  return rules;
}

namespace {

// Rules `<prefix>0` .. `<prefix>(L-1)` for any text that does not contain `marker` (L bytes,
// ASCII, its first byte nowhere else in it, as each format's call marker): rule i is the state
// of a scan that has matched the marker's first i bytes, so the marker can only begin a call.
// Right recursion, as the grammar writes X* itself.
std::string text_without(std::string_view marker, const std::string& prefix) {
  const auto m0 = static_cast<uint32_t>(static_cast<unsigned char>(marker[0]));
  auto state = [&](size_t i) { return prefix + std::to_string(i); };
  auto not_these = [](std::vector<code_range> r) { return gbnf_class(complement_ranges(normalize_ranges(std::move(r)))); };
  std::string rules;
  for (size_t i = 0; i < marker.size(); ++i) {
    rules += state(i) + " ::= ";
    if (i == 0) {
      rules += not_these({{m0, m0}}) + " " + state(0);
    } else {
      const auto next = static_cast<uint32_t>(static_cast<unsigned char>(marker[i]));
      rules += not_these({{m0, m0}, {next, next}}) + " " + state(0);
      if (i + 1 < marker.size()) rules += " | " + gbnf_literal(marker.substr(i, 1)) + " " + state(i + 1);
    }
    rules += " | " + gbnf_literal(marker.substr(0, 1)) + " " + state(1) + " | \"\"\n";
  }
  return rules;
}

}  // namespace

bool auto_calls_constrainable(tool_format f) { return f == tool_format::hermes; }

result<std::string> auto_calls_grammar(tool_format f, const std::vector<tool_def>& tools, bool many) {
  if (!auto_calls_constrainable(f))
    return make_error(std::string("tools: a reply under tool_choice \"auto\" cannot be constrained for the ") +
                      to_string(f) + " call format");
  std::vector<tool_def> defs = tools;
  for (auto& d : defs)
    if (!d.strict) d.parameters = "{\"type\": \"object\"}";  // any arguments object, as the model writes it
  auto calls = calls_grammar(f, defs, "", many, "calls");
  if (!calls) return calls;
  return *calls + text_without(hermes_open, "free") + "root ::= free0 calls?\n";
}

tool_call_parser::tool_call_parser(tool_format f, bool forced, std::string forced_name,
                                   std::vector<std::string> known_names)
    : f_(f), forced_(forced), forced_name_(std::move(forced_name)), known_names_(std::move(known_names)) {}

bool tool_call_parser::offered(const std::string& name) const {
  return forced_ || known_names_.empty() ||
         std::find(known_names_.begin(), known_names_.end(), name) != known_names_.end();
}

void tool_call_parser::cut_short(std::vector<delta>& out) {
  // A forced reply that ended before its call's name: no content, and the call tool_choice named
  // (if it named one), its arguments "" (they had not begun: the name comes first).
  buf_.clear();
  in_call_ = false;
  if (forced_name_.empty()) return;
  const auto idx = static_cast<int32_t>(calls_.size());
  out.push_back(delta{{}, idx, forced_name_, {}});
  calls_.push_back({forced_name_, {}});
}

std::vector<tool_call_parser::delta> tool_call_parser::push(std::string_view text) {
  buf_ += text;
  return scan(false);
}

std::vector<tool_call_parser::delta> tool_call_parser::finish() { return scan(true); }

std::vector<tool_call_parser::delta> tool_call_parser::scan(bool at_end) {
  std::vector<delta> out;
  auto content = [&](std::string s) {
    if (s.empty()) return;
    if (!out.empty() && out.back().call < 0) out.back().content += s;
    else out.push_back(delta{std::move(s), -1, {}, {}});
  };
  const auto index = static_cast<int32_t>(calls_.size());

  if (f_ != tool_format::hermes) {
    // A llama3 / mistral call is the whole reply: decided by how it starts, read at the end.
    if (!whole_) {
      size_t i = 0;
      while (i < buf_.size() && is_space(buf_[i])) ++i;
      const std::string_view rest(buf_.data() + i, buf_.size() - i);
      const std::string_view marker = f_ == tool_format::mistral ? mistral_marker : llama3_tag;
      const bool could_be = (f_ == tool_format::llama3 && !rest.empty() && rest[0] == '{') ||
                            marker.substr(0, std::min(marker.size(), rest.size())) == rest.substr(0, std::min(marker.size(), rest.size()));
      if (rest.empty() && !at_end) return out;
      if (forced_ && at_end && (!could_be || rest.empty())) {
        cut_short(out);
        return out;
      }
      if (!could_be || rest.empty()) {
        content(std::move(buf_));
        buf_.clear();
        whole_ = true;  // decided: plain content from here on
        in_call_ = false;
        return out;
      }
      if (rest.size() < marker.size() && !(f_ == tool_format::llama3 && rest[0] == '{') && !at_end) return out;
      in_call_ = true;
      whole_ = true;
    }
    if (!in_call_) {
      content(std::move(buf_));
      buf_.clear();
      return out;
    }
    if (!at_end) return out;
    // Parse the held reply: a JSON object (llama3) or an array after the marker (mistral).
    std::string body = buf_;
    size_t p = body.find(f_ == tool_format::mistral ? mistral_marker : llama3_tag);
    if (p != std::string::npos) body = body.substr(p + (f_ == tool_format::mistral ? mistral_marker.size() : llama3_tag.size()));
    simdjson::dom::parser parser;
    simdjson::dom::element root;
    bool ok = parser.parse(body).get(root) == simdjson::SUCCESS;
    std::vector<simdjson::dom::element> items;
    if (ok && root.is_array()) for (auto x : simdjson::dom::array(root)) items.push_back(x);
    else if (ok && root.is_object()) items.push_back(root);
    std::vector<function_call> found;
    for (auto& x : items) {
      simdjson::dom::element name, args;
      if (!x.is_object() || simdjson::dom::object(x)["name"].get(name) != simdjson::SUCCESS || !name.is_string()) {
        found.clear();
        break;
      }
      if (simdjson::dom::object(x)["arguments"].get(args) != simdjson::SUCCESS &&
          simdjson::dom::object(x)["parameters"].get(args) != simdjson::SUCCESS) {
        found.push_back({std::string(std::string_view(name)), "{}"});
        continue;
      }
      found.push_back({std::string(std::string_view(name)),
                       args.is_string() ? std::string(std::string_view(args)) : simdjson::minify(args)});
    }
    // One name not offered and the reply is no call: the calls share one piece of markup, which
    // cannot be part content, part calls.
    for (const auto& c : found)
      if (!offered(c.name)) {
        found.clear();
        break;
      }
    if (found.empty() && forced_) {
      cut_short(out);
      return out;
    }
    if (found.empty()) {
      content(std::move(buf_));
    } else {
      for (auto& c : found) {
        out.push_back(delta{{}, static_cast<int32_t>(calls_.size()), c.name, c.arguments});
        calls_.push_back(std::move(c));
      }
    }
    buf_.clear();
    in_call_ = false;
    return out;
  }

  for (;;) {
    if (!in_call_) {
      const size_t open = buf_.find(hermes_open);
      if (open == std::string::npos) {
        if (forced_ && at_end && calls_.empty()) {  // cut inside the opening marker, or before it
          cut_short(out);
          return out;
        }
        // (A forced reply is calls only: whatever precedes the first marker waits for it.)
        const size_t keep = at_end ? 0 : forced_ && calls_.empty() ? buf_.size() : held_back(buf_, hermes_open);
        // Whitespace after a call waits: it is content only if more text follows, not a call.
        bool blank = true;
        for (size_t i = 0; i < buf_.size() - keep; ++i) blank = blank && is_space(buf_[i]);
        if (blank && !calls_.empty()) {
          if (at_end) buf_.clear();
          return out;
        }
        content(buf_.substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      // Text before the call is content; the whitespace between calls is not.
      std::string before = buf_.substr(0, open);
      bool blank = true;
      for (char c : before) blank = blank && is_space(c);
      gap_.clear();
      if (!(blank && !calls_.empty())) content(std::move(before));
      else gap_ = std::move(before);
      buf_.erase(0, open + hermes_open.size());
      in_call_ = true;
      unknown_ = false;
      named_ = args_done_ = in_str_ = esc_ = started_ = false;
      args_from_ = args_sent_ = scan_ = 0;
      depth_ = 0;
    }
    const int32_t idx = static_cast<int32_t>(calls_.size());
    (void)index;
    if (!named_) {
      const size_t v = value_after_key(buf_, "\"name\"");
      if (v != std::string::npos && buf_[v] == '"') {
        size_t e = v + 1;
        bool esc = false;
        for (; e < buf_.size(); ++e) {
          if (esc) esc = false;
          else if (buf_[e] == '\\') esc = true;
          else if (buf_[e] == '"') break;
        }
        if (e < buf_.size()) {
          std::string name;
          simdjson::dom::parser p;
          simdjson::dom::element el;
          if (p.parse(buf_.substr(v, e - v + 1)).get(el) == simdjson::SUCCESS && el.is_string())
            name = std::string(std::string_view(el));
          else
            name = buf_.substr(v + 1, e - v - 1);
          named_ = true;
          if (offered(name)) {
            cur_name_ = name;
            out.push_back(delta{{}, idx, std::move(name), {}});
          } else {
            unknown_ = true;  // decided before its name goes out: no call
          }
        }
      }
    }
    if (unknown_) {
      // A call of a function not offered: its markup, as written, is content once it is whole.
      const size_t close = buf_.find(hermes_close);
      if (close == std::string::npos && !at_end) return out;
      content(gap_ + std::string(hermes_open) + buf_.substr(0, close) +
              (close == std::string::npos ? "" : std::string(hermes_close)));
      gap_.clear();
      in_call_ = unknown_ = false;
      if (close == std::string::npos) {
        buf_.clear();
        return out;
      }
      buf_.erase(0, close + hermes_close.size());
      continue;
    }
    if (named_ && args_from_ == 0) {
      size_t v = value_after_key(buf_, "\"arguments\"");
      if (v == std::string::npos) v = value_after_key(buf_, "\"parameters\"");
      if (v != std::string::npos) args_from_ = scan_ = v;
    }
    if (named_ && args_from_ > 0 && !args_done_) {
      // Scan the arguments' JSON value to its end: depth over {} and [] outside strings.
      size_t i = scan_;
      for (; i < buf_.size() && !args_done_; ++i) {
        const char c = buf_[i];
        if (in_str_) {
          if (esc_) esc_ = false;
          else if (c == '\\') esc_ = true;
          else if (c == '"') {
            in_str_ = false;
            if (depth_ == 0) args_done_ = true;  // a bare string value
          }
          continue;
        }
        if (c == '"') {
          in_str_ = true;
          started_ = true;
        } else if (c == '{' || c == '[') {
          ++depth_;
          started_ = true;
        } else if (c == '}' || c == ']') {
          if (depth_ == 0) {  // the enclosing object's end: a scalar value ended before it
            args_done_ = true;
            break;
          }
          if (--depth_ == 0) args_done_ = true;
        } else if (depth_ == 0 && started_ && (c == ',' || is_space(c))) {
          args_done_ = true;
          break;
        } else if (!is_space(c)) {
          started_ = true;
        }
      }
      scan_ = i;
      const size_t upto = scan_;
      if (upto > args_from_ + args_sent_) {
        std::string piece = buf_.substr(args_from_ + args_sent_, upto - args_from_ - args_sent_);
        // Trailing whitespace of a scalar is not part of the value.
        if (args_done_)
          while (!piece.empty() && is_space(piece.back())) piece.pop_back();
        args_sent_ += upto - args_from_ - args_sent_;
        if (!piece.empty()) out.push_back(delta{{}, idx, {}, std::move(piece)});
      }
    }
    const size_t close = buf_.find(hermes_close);
    if (close == std::string::npos && !at_end) return out;
    // The call is complete (or the output ended inside it).
    std::string body = buf_.substr(0, close == std::string::npos ? buf_.size() : close);
    function_call c;
    simdjson::dom::parser p;
    simdjson::dom::element root, name, args;
    const bool parsed = p.parse(body).get(root) == simdjson::SUCCESS && root.is_object();
    if (parsed && simdjson::dom::object(root)["name"].get(name) == simdjson::SUCCESS && name.is_string()) {
      c.name = std::string(std::string_view(name));
      if (simdjson::dom::object(root)["arguments"].get(args) == simdjson::SUCCESS ||
          simdjson::dom::object(root)["parameters"].get(args) == simdjson::SUCCESS)
        c.arguments = args.is_string() ? std::string(std::string_view(args)) : simdjson::minify(args);
      else
        c.arguments = "{}";
    }
    if (!named_ && c.name.empty() && forced_) {
      cut_short(out);
      return out;
    }
    if (!named_ && (c.name.empty() || !offered(c.name))) {
      // Not a call after all (no name, or one not offered): what the model wrote is content.
      content(gap_ + std::string(hermes_open) + body + (close == std::string::npos ? "" : std::string(hermes_close)));
    } else {
      if (!named_) out.push_back(delta{{}, idx, c.name, {}});
      // Arguments not streamed (not found while scanning, or written before the name): send them now,
      // so that the deltas add up to calls()[idx].arguments.
      if (args_sent_ == 0) {
        // A call without arguments is "{}"; one cut off (the output ended inside it) before they
        // began has "" (no arguments were written, and "{}" would claim complete ones).
        if (c.arguments.empty() && close != std::string::npos) c.arguments = "{}";
        if (!c.arguments.empty()) out.push_back(delta{{}, idx, {}, c.arguments});
      } else {
        std::string streamed = buf_.substr(args_from_, args_sent_);
        while (!streamed.empty() && is_space(streamed.back())) streamed.pop_back();
        c.arguments = streamed;
      }
      if (c.name.empty()) c.name = cur_name_;  // a call whose JSON broke: the streamed name stands
      calls_.push_back(std::move(c));
    }
    in_call_ = false;
    gap_.clear();
    if (close == std::string::npos) {
      buf_.clear();
      return out;
    }
    buf_.erase(0, close + hermes_close.size());
  }
}

}  // namespace troupe::structured
