#include "model/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "model/detail/tokenizer_utf8.hpp"

namespace troupe::model {

namespace {

// The patterns below are the ones llama.cpp applies per pre-tokenizer type (src/llama-vocab.cpp),
// written for PCRE2. llama.cpp's GPT-2 pattern omits the final `\s+` because its splitter keeps
// unmatched text as pieces anyway; whitespace is the only text the other branches leave, so
// adding it back changes nothing and keeps the pattern as GPT-2 published it.
constexpr const char* k_gpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3's `(?i:'s|...)` spelled out, as llama.cpp does, so no case folding beyond ASCII.
constexpr const char* k_llama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* k_qwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen 3.5: combining marks stay with the letters they modify.
constexpr const char* k_qwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

bool one_of(std::string_view s, std::initializer_list<std::string_view> names) {
  for (auto n : names)
    if (s == n) return true;
  return false;
}

}  // namespace

result<pretokenizer_config> pretokenizer_config_for(std::string_view pre) {
  pretokenizer_config c;
  if (pre.empty() || pre == "default") {
    // llama.cpp's fallback for BPE vocabularies that name no pre-tokenizer.
    c.name = "default";
    c.patterns = {R"([\p{P}\$\+<=>\^~\|]+)", k_gpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  } else if (one_of(pre, {"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de",
                          "jina-v2-es", "jina-v2-de", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                          "gigachat", "exaone4", "mellum", "a.x-4.0", "trillion",
                          "granite-docling", "modern-bert"})) {
    c.name = "gpt2";
    c.patterns = {k_gpt2};
  } else if (one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                          "midm-2.0", "lfm2"})) {
    c.name = "llama3";
    c.patterns = {k_llama3};
    c.ignore_merges = true;
    c.add_bos = true;
  } else if (one_of(pre, {"dbrx", "smaug-bpe"})) {
    c.name = "llama3";
    c.patterns = {k_llama3};
  } else if (one_of(pre, {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "kormo"})) {
    c.name = "qwen2";
    c.patterns = {k_qwen2};
  } else if (pre == "qwen35") {
    c.name = "qwen35";
    c.patterns = {k_qwen35};
  } else if (pre == "falcon") {
    c.name = "falcon";
    c.patterns = {R"([\p{P}\$\+<=>\^~\|`]+)", k_gpt2, "[0-9][0-9][0-9]"};
  } else if (pre == "deepseek-coder") {
    c.name = "deepseek-coder";
    c.patterns = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})"};
  } else if (one_of(pre, {"starcoder", "smollm", "refact", "command-r", "codeshell", "exaone",
                          "minerva-7b", "mellum2"})) {
    // Digits one by one first, then GPT-2's split inside what is left.
    c.name = "starcoder";
    c.patterns = {R"(\p{N})", k_gpt2};
  } else {
    return make_error("unsupported pre-tokenizer '" + std::string(pre) + "'");
  }
  return c;
}

struct pretokenizer::regex {
  pcre2_code* code = nullptr;
  ~regex() { pcre2_code_free(code); }
};

result<pretokenizer> pretokenizer::compile(const pretokenizer_config& config) {
  pretokenizer p;
  p.config_ = config;
  for (const auto& pattern : config.patterns) {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    auto r = std::make_shared<regex>();
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return make_error("pre-tokenizer '" + config.name + "': bad pattern at offset " +
                        std::to_string(err_off) + ": " + reinterpret_cast<const char*>(msg));
    }
    // Without JIT (a build or platform that lacks it) the interpreter gives the same matches.
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);
    p.regexes_.push_back(std::move(r));
  }
  return p;
}

namespace {

// Per-call matching state: match data, plus a larger JIT stack only if a long input needs one.
class matcher {
 public:
  explicit matcher(const pcre2_code* code)
      : code_(code), md_(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~matcher() {
    pcre2_match_data_free(md_);
    if (ctx_) pcre2_match_context_free(ctx_);
    if (stack_) pcre2_jit_stack_free(stack_);
  }
  matcher(const matcher&) = delete;
  matcher& operator=(const matcher&) = delete;

  // Finds the next match in s from `from`; false when there is none (or matching failed).
  bool next(std::string_view s, size_t from, size_t& begin, size_t& end) {
    int rc = run(s, from);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !stack_) {
      stack_ = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
      ctx_ = pcre2_match_context_create(nullptr);
      pcre2_jit_stack_assign(ctx_, nullptr, stack_);
      rc = run(s, from);
    }
    if (rc < 0) return false;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_);
    begin = ov[0];
    end = ov[1];
    return true;
  }

 private:
  int run(std::string_view s, size_t from) {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), from,
                       PCRE2_NO_UTF_CHECK, md_, ctx_);
  }

  const pcre2_code* code_;
  pcre2_match_data* md_;
  pcre2_match_context* ctx_ = nullptr;
  pcre2_jit_stack* stack_ = nullptr;
};

// Appends the pieces of `s` under one pattern: each match, and each stretch between matches.
void split_piece(matcher& m, std::string_view s, std::vector<std::string_view>& out) {
  size_t gap = 0;   // start of text not yet emitted
  size_t from = 0;  // where the next search starts
  while (from <= s.size()) {
    size_t b = 0, e = 0;
    if (!m.next(s, from, b, e)) break;
    if (b > gap) out.push_back(s.substr(gap, b - gap));
    if (e > b) {
      out.push_back(s.substr(b, e - b));
      gap = from = e;
    } else {
      // An empty match only marks a boundary; step over one character to make progress.
      gap = b;
      if (b >= s.size()) break;
      from = b + detail::utf8_lead_len(static_cast<unsigned char>(s[b]));
    }
  }
  if (gap < s.size()) out.push_back(s.substr(gap));
}

}  // namespace

std::vector<std::string_view> pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& r : regexes_) {
    matcher m(r->code);
    next.clear();
    next.reserve(pieces.size() * 2);
    for (auto piece : pieces) split_piece(m, piece, next);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace troupe::model
