#include "model/chat_template.hpp"

#include <algorithm>
#include <utility>

#include "model/detail/tokenizer_utf8.hpp"
#include "model/gguf_reader.hpp"

namespace troupe::model {

namespace {

constexpr size_t npos = std::string_view::npos;

bool contains(std::string_view s, std::string_view needle) { return s.find(needle) != npos; }

// Python's str.isspace(), which Jinja's `trim` filter and str.strip() go by.
bool py_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// The code point starting at s[i] and its length; invalid bytes read as themselves, length 1.
std::pair<uint32_t, size_t> code_point_at(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const auto r = detail::scan_utf8(p, s.size() - i);
  if (r.status != detail::utf8_status::complete || r.len == 1) return {p[0], 1};
  uint32_t cp = p[0] & (0x7F >> r.len);
  for (size_t k = 1; k < r.len; ++k) cp = (cp << 6) | (p[k] & 0x3F);
  return {cp, r.len};
}

// Python's str.lstrip() / rstrip() / strip() with no arguments (Jinja's `trim`, and `.strip()`
// in templates).
std::string py_lstrip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    auto [cp, n] = code_point_at(s, b);
    if (!py_space(cp)) break;
    b += n;
  }
  return std::string(s.substr(b));
}

std::string py_rstrip(std::string_view s) {
  size_t e = 0, last = 0;  // `last`: end of the last non-space code point
  while (e < s.size()) {
    auto [cp, n] = code_point_at(s, e);
    e += n;
    if (!py_space(cp)) last = e;
  }
  return std::string(s.substr(0, last));
}

std::string py_strip(std::string_view s) { return py_rstrip(py_lstrip(s)); }

// A Jinja string literal's body back to text (\n, \t, \', \", \\).
std::string unescape_jinja(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
  }
  return out;
}

// Text that is a plain literal, not Jinja code or the seam between literal and expression.
bool is_plain_literal(std::string_view s) {
  for (std::string_view code : {"{{", "}}", "{%", "%}", "' +", "+ '", "\" +", "+ \"", "'+", "+'",
                                "\"+", "+\""})
    if (contains(s, code)) return false;
  return true;
}

// The line break after a literal prefix, spelled either as a real newline (templates stored
// with their escapes resolved) or as the two characters of a Jinja "\n" escape.
size_t skip_newline(std::string_view t, size_t pos) {
  if (t.substr(pos, 1) == "\n") return pos + 1;
  if (t.substr(pos, 2) == "\\n") return pos + 2;
  return npos;
}

// The system prompt a ChatML template inserts when the conversation has none, as in SmolLM2's
// '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n'.
std::string chatml_default_system(std::string_view t) {
  const std::string_view head = "<|im_start|>system";
  for (size_t pos = 0; (pos = t.find(head, pos)) != npos; pos += head.size()) {
    const size_t body = skip_newline(t, pos + head.size());
    if (body == npos) continue;
    const size_t end = t.find("<|im_end|>", body);
    if (end == npos) break;
    const auto candidate = t.substr(body, end - body);
    if (!candidate.empty() && is_plain_literal(candidate)) return unescape_jinja(candidate);
  }
  return {};
}

// The text after `key` up to the end of its line (real or escaped newline) or closing quote.
std::string literal_after(std::string_view t, std::string_view key) {
  const size_t pos = t.find(key);
  if (pos == npos) return {};
  const size_t b = pos + key.size();
  size_t e = b;
  while (e < t.size() && t[e] != '\n' && t[e] != '"' && t[e] != '\'' &&
         !(t[e] == '\\' && e + 1 < t.size() && t[e + 1] == 'n'))
    ++e;
  return std::string(t.substr(b, e - b));
}

// Jinja templates that lack a system role get system text prepended to the next user turn
// (llama.cpp's polyfill for them does the same), rather than failing the request.
std::vector<chat_message> fold_system_into_user(const std::vector<chat_message>& in) {
  std::vector<chat_message> out;
  std::string pending;
  bool has_pending = false;
  for (const auto& m : in) {
    if (m.role == "system") {
      pending = has_pending ? pending + "\n" + m.content : m.content;
      has_pending = true;
      continue;
    }
    if (has_pending) {
      if (m.role == "user") {
        out.push_back({"user", pending + "\n" + m.content, {}});
        has_pending = false;
        continue;
      }
      out.push_back({"user", pending, {}});
      has_pending = false;
    }
    out.push_back(m);
  }
  if (has_pending) out.push_back({"user", pending, {}});
  return out;
}

// Builds a prompt as pieces: tpl() for the template's own text, text() for a message's.
class piece_writer {
 public:
  piece_writer& tpl(std::string_view t) { return add(t, true); }
  piece_writer& text(std::string_view t) { return add(t, false); }
  // Appends what another writer built (a turn built apart, to be stripped as a whole).
  piece_writer& append(const std::vector<prompt_piece>& ps) {
    for (const auto& p : ps) add(p.text, p.from_template);
    return *this;
  }
  // Python's str.strip() over the whole text, across piece edges (Llama 2 strips a turn whose
  // system block is template text and whose rest is the user's).
  piece_writer& strip() {
    while (!out_.empty()) {
      std::string s = py_lstrip(out_.front().text);
      if (!s.empty()) {
        out_.front().text = std::move(s);
        break;
      }
      out_.erase(out_.begin());
    }
    while (!out_.empty()) {
      std::string s = py_rstrip(out_.back().text);
      if (!s.empty()) {
        out_.back().text = std::move(s);
        break;
      }
      out_.pop_back();
    }
    return *this;
  }
  std::vector<prompt_piece> take() { return std::move(out_); }

 private:
  piece_writer& add(std::string_view t, bool from_template) {
    if (t.empty()) return *this;
    if (!out_.empty() && out_.back().from_template == from_template)
      out_.back().text.append(t);
    else
      out_.push_back({std::string(t), from_template});
    return *this;
  }
  std::vector<prompt_piece> out_;
};

constexpr const char* k_alternate_error =
    "Conversation roles must alternate user/assistant/user/assistant/...";

}  // namespace

const char* to_string(chat_family f) {
  switch (f) {
    case chat_family::chatml: return "chatml";
    case chat_family::llama2: return "llama2";
    case chat_family::llama3: return "llama3";
    case chat_family::mistral: return "mistral";
  }
  return "unknown";
}

chat_template chat_template::detect(std::string_view t, std::string_view model_name,
                                    std::string bos_text, std::string eos_text) {
  chat_template c;
  c.bos_ = std::move(bos_text);
  c.eos_ = std::move(eos_text);
  const std::string name = model_name.empty() ? std::string("(unnamed)") : std::string(model_name);
  if (contains(t, "<|start_header_id|>")) {
    c.family_ = chat_family::llama3;
    if (contains(t, "Cutting Knowledge Date")) {
      c.llama3_dated_preamble_ = true;
      // Meta's template spells both dates as literals; these defaults are its values.
      c.llama3_cutoff_ = literal_after(t, "Cutting Knowledge Date: ");
      if (c.llama3_cutoff_.empty()) c.llama3_cutoff_ = "December 2023";
      c.llama3_date_ = literal_after(t, "date_string = \"");
      if (c.llama3_date_.empty()) c.llama3_date_ = "26 Jul 2024";
    }
  } else if (contains(t, "<|im_start|>")) {
    c.family_ = chat_family::chatml;
    c.default_system_ = chatml_default_system(t);
  } else if (contains(t, "[INST]")) {
    c.family_ = contains(t, "<<SYS>>") ? chat_family::llama2 : chat_family::mistral;
  } else {
    c.family_ = chat_family::chatml;
    c.warning_ = "model '" + name + "' " +
                 (t.empty() ? "has no chat template" : "has a chat template of an unknown family") +
                 "; using ChatML";
  }
  return c;
}

chat_template chat_template::from_gguf(const gguf_file& f) {
  std::string name = f.get_string_or("general.name", "");
  if (name.empty()) {
    name = f.path();
    const size_t slash = name.find_last_of('/');
    if (slash != std::string::npos) name.erase(0, slash + 1);
  }
  auto token_text = [&](const char* key) -> std::string {
    const auto* tokens = f.find("tokenizer.ggml.tokens");
    const int64_t id = f.get_int_or(key, -1);
    if (!tokens || tokens->type != gguf_value_type::array ||
        tokens->array_type != gguf_value_type::string || id < 0 ||
        static_cast<uint64_t>(id) >= tokens->as_array().size())
      return {};
    return tokens->as_array()[static_cast<size_t>(id)].as_string();
  };
  return detect(f.get_string_or("tokenizer.chat_template", ""), name,
                token_text("tokenizer.ggml.bos_token_id"), token_text("tokenizer.ggml.eos_token_id"));
}

result<std::string> chat_template::render(const std::vector<chat_message>& messages,
                                          bool add_generation_prompt) const {
  auto p = render_pieces(messages, add_generation_prompt);
  if (!p) return make_error(p.error());
  std::string out;
  for (const auto& piece : p.value()) out += piece.text;
  return out;
}

result<std::vector<prompt_piece>> chat_template::render_pieces(const std::vector<chat_message>& messages,
                                                               bool add_generation_prompt) const {
  if (family_ == chat_family::chatml) return render_chatml(messages, add_generation_prompt);
  // No place for a participant's name in these formats' turns: it goes in front of the content.
  std::vector<chat_message> named;
  const bool any_name = std::any_of(messages.begin(), messages.end(), [](const chat_message& x) { return !x.name.empty(); });
  if (any_name) {
    named = messages;
    for (auto& x : named)
      if (!x.name.empty()) x.content = x.name + ": " + x.content;
  }
  const auto& m = any_name ? named : messages;
  switch (family_) {
    case chat_family::chatml: break;
    case chat_family::llama2: return render_llama2(m);
    case chat_family::llama3: return render_llama3(m, add_generation_prompt);
    case chat_family::mistral: return render_mistral(m);
  }
  return make_error("unknown chat template family");
}

result<chat_template::pieces> chat_template::render_chatml(const std::vector<chat_message>& m, bool gen) const {
  piece_writer out;
  for (size_t i = 0; i < m.size(); ++i) {
    if (i == 0 && m[0].role != "system" && !default_system_.empty())
      out.tpl("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
    // The role is the client's text too ("tool", or any name the format passes through).
    out.tpl("<|im_start|>").text(m[i].role);
    if (!m[i].name.empty()) out.text(" name=" + m[i].name);
    out.tpl("\n").text(m[i].content).tpl("<|im_end|>\n");
  }
  if (gen) out.tpl("<|im_start|>assistant\n");
  return out.take();
}

// Meta's Llama 2 chat template: the system prompt goes inside the first [INST] block, each
// user turn opens with bos, each assistant turn closes with eos; the generation prompt is
// implicit (the prompt already ends in [/INST]).
result<chat_template::pieces> chat_template::render_llama2(const std::vector<chat_message>& m) const {
  size_t first = 0;
  bool has_system = false;
  std::string system;
  if (!m.empty() && m[0].role == "system") {
    has_system = true;
    system = m[0].content;
    first = 1;
  }
  piece_writer out;
  for (size_t i = first; i < m.size(); ++i) {
    const size_t turn = i - first;
    const bool user = m[i].role == "user";
    if (user != (turn % 2 == 0)) return make_error(k_alternate_error);
    piece_writer content;
    if (turn == 0 && has_system) content.tpl("<<SYS>>\n").text(system).tpl("\n<</SYS>>\n\n");
    content.text(m[i].content).strip();
    if (user)
      out.tpl(bos_ + "[INST] ").append(content.take()).tpl(" [/INST]");
    else if (m[i].role == "assistant")
      out.tpl(" ").append(content.take()).tpl(" " + eos_);
  }
  return out.take();
}

result<chat_template::pieces> chat_template::render_llama3(const std::vector<chat_message>& m, bool gen) const {
  piece_writer out;
  auto turn = [&](const chat_message& msg) {
    out.tpl("<|start_header_id|>").text(msg.role).tpl("<|end_header_id|>\n\n").text(py_strip(msg.content));
    out.tpl("<|eot_id|>");
  };
  if (llama3_dated_preamble_) {
    // 3.1+: bos, then a system block that is always there, dated, carrying the system prompt.
    size_t first = 0;
    std::string system;
    if (!m.empty() && m[0].role == "system") {
      system = py_strip(m[0].content);
      first = 1;
    }
    out.tpl(bos_);
    out.tpl("<|start_header_id|>system<|end_header_id|>\n\n");
    out.tpl("Cutting Knowledge Date: " + llama3_cutoff_ + "\nToday Date: " + llama3_date_ + "\n\n");
    out.text(system).tpl("<|eot_id|>");
    for (size_t i = first; i < m.size(); ++i) turn(m[i]);
  } else {
    for (size_t i = 0; i < m.size(); ++i) {
      if (i == 0) out.tpl(bos_);
      turn(m[i]);
    }
  }
  if (gen) out.tpl("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out.take();
}

// Mistral Instruct v0.1/v0.2: bos once, "[INST] user [/INST]" then "assistant</s>". The Jinja
// template rejects system messages; they are folded into the next user turn instead.
result<chat_template::pieces> chat_template::render_mistral(const std::vector<chat_message>& in) const {
  const auto m = fold_system_into_user(in);
  piece_writer out;
  out.tpl(bos_);
  for (size_t i = 0; i < m.size(); ++i) {
    const bool user = m[i].role == "user";
    if (user != (i % 2 == 0)) return make_error(k_alternate_error);
    if (user)
      out.tpl("[INST] ").text(m[i].content).tpl(" [/INST]");
    else if (m[i].role == "assistant")
      out.text(m[i].content).tpl(eos_);
    else
      return make_error("Only user and assistant roles are supported!");
  }
  return out.take();
}

}  // namespace troupe::model
