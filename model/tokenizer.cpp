#include "model/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include "model/detail/tokenizer_bpe.hpp"
#include "model/detail/tokenizer_data.hpp"
#include "model/detail/tokenizer_spm.hpp"
#include "model/detail/tokenizer_utf8.hpp"
#include "model/gguf_reader.hpp"

namespace troupe::model {

namespace {

using detail::tokenizer_data;

// Tokens llama.cpp recognises by text (src/llama-vocab.cpp), because converters do not always
// record them in metadata. A token found this way becomes a control token, as llama.cpp forces.
using names = std::initializer_list<std::string_view>;
const names k_eot_names = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                           "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
                           "<end_of_utterance>"};
const names k_eom_names = {"<|eom_id|>"};
const names k_fim_pre_names = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>",
                               "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"};
const names k_fim_suf_names = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>",
                               "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"};
const names k_fim_mid_names = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>",
                               "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"};
const names k_fim_pad_names = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const names k_fim_rep_names = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const names k_fim_sep_names = {"<|file_sep|>"};
// Every token with one of these texts ends generation.
const names k_eog_names = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["};

bool in(std::string_view s, names list) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// An optional metadata id; out-of-range ids are ignored, as llama.cpp does.
// An id outside the vocabulary is ignored with a warning, as llama.cpp does ("bad special
// token ... using default id"), not refused: converted files in circulation carry such ids (a
// padding id one past the last token, ids of added tokens the list lacks), and the model works
// without them. -1 and its u32 form are the conventional "none" and pass without a word.
void read_id(const gguf_file& f, const char* key, int32_t n, int32_t& id) {
  const auto* v = f.find(key);
  if (v && v->is_integer()) {
    const int64_t x = v->as_int();
    if (x >= 0 && x < n) {
      id = static_cast<int32_t>(x);
    } else if (x != -1 && x != 0xFFFFFFFFll) {
      const int32_t kept = id >= 0 && id < n ? id : -1;
      std::fprintf(stderr, "troupe: warning: %s: %s = %lld is outside the vocabulary (0..%d); %s\n", f.path().c_str(), key,
                   static_cast<long long>(x), n - 1,
                   kept >= 0 ? ("using the default " + std::to_string(kept)).c_str() : "ignored");
    }
  }
  if (id >= n) id = -1;
}

void read_flag(const gguf_file& f, const char* key, bool& flag) {
  const auto* v = f.find(key);
  if (v && (v->type == gguf_value_type::boolean || v->is_integer())) flag = v->as_int() != 0;
}

// Builds a new string: replacing in place would shift the tail once per match (quadratic on
// long runs of spaces).
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t m; (m = s.find(from, pos)) != std::string_view::npos; pos = m + from.size()) {
    out.append(s, pos, m - pos);
    out.append(to);
  }
  out.append(s, pos, std::string_view::npos);
  return out;
}

constexpr std::string_view k_spm_space = "\xE2\x96\x81";  // ▁ U+2581

// Byte-level text back to bytes. Code points outside the alphabet pass through unchanged.
std::string byte_level_decode(std::string_view s) {
  const auto& alpha = detail::byte_level_alphabet::get();
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const auto r = detail::scan_utf8(p + i, s.size() - i);
    if (r.status != detail::utf8_status::complete) {
      out += s[i++];
      continue;
    }
    uint32_t cp = r.len == 1 ? p[i] : (p[i] & (0x7F >> r.len));
    for (size_t k = 1; k < r.len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
    if (cp < alpha.decode.size() && alpha.decode[cp] >= 0)
      out += static_cast<char>(alpha.decode[cp]);
    else
      out.append(s.data() + i, r.len);
    i += r.len;
  }
  return out;
}

int parse_byte_token(std::string_view t) {  // "<0xNN>" -> NN, else -1
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  char hex[3] = {t[3], t[4], 0};
  char* end = nullptr;
  const long v = std::strtol(hex, &end, 16);
  return end == hex + 2 ? static_cast<int>(v) : -1;
}

std::string make_piece(const tokenizer_data& d, int32_t id) {
  const std::string& t = d.text[id];
  switch (d.type[id]) {
    case token_type::control:
    case token_type::unknown:
    case token_type::user_defined:
      return t;
    case token_type::normal:
      return d.kind == tokenizer_kind::spm ? replace_all(t, k_spm_space, " ") : byte_level_decode(t);
    case token_type::byte: {
      const int b = parse_byte_token(t);
      return b < 0 ? std::string() : std::string(1, static_cast<char>(b));
    }
    default:
      return {};  // unused / undefined tokens stand for nothing, as in llama.cpp
  }
}

status load_vocab(const gguf_file& f, tokenizer_data& d) {
  const auto* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens) return make_error("missing metadata key 'tokenizer.ggml.tokens'");
  if (tokens->type != gguf_value_type::array || tokens->array_type != gguf_value_type::string)
    return make_error("metadata key 'tokenizer.ggml.tokens' is not an array of strings");
  const auto& arr = tokens->as_array();
  if (arr.empty()) return make_error("metadata key 'tokenizer.ggml.tokens' is empty");
  if (arr.size() > static_cast<size_t>(INT32_MAX))
    return make_error("metadata key 'tokenizer.ggml.tokens' has too many entries");
  const auto n = arr.size();

  std::vector<double> scores;
  if (f.has("tokenizer.ggml.scores")) {
    auto s = f.get_float_array("tokenizer.ggml.scores");
    if (!s) return make_error(s.error());
    if (s->size() < n)
      return make_error("metadata key 'tokenizer.ggml.scores' has fewer entries than tokens");
    scores = std::move(s.value());
  }
  std::vector<int64_t> types;
  if (f.has("tokenizer.ggml.token_type")) {
    auto t = f.get_int_array("tokenizer.ggml.token_type");
    if (!t) return make_error(t.error());
    if (t->size() < n)
      return make_error("metadata key 'tokenizer.ggml.token_type' has fewer entries than tokens");
    types = std::move(t.value());
  }

  d.text.resize(n);
  d.score.assign(n, 0.0f);
  d.type.assign(n, token_type::normal);
  d.ids.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    std::string& word = d.text[i];
    word = arr[i].as_string();
    if (word.empty()) word = "[EMPTY_" + std::to_string(i) + "]";  // llama.cpp's placeholder
    auto [it, fresh] = d.ids.emplace(std::string_view(word), static_cast<int32_t>(i));
    if (!fresh)
      return make_error("duplicate token in vocabulary: '" + word + "' has ids " +
                        std::to_string(it->second) + " and " + std::to_string(i));
    if (!scores.empty()) d.score[i] = static_cast<float>(scores[i]);
    if (!types.empty()) {
      const int64_t t = types[i];
      d.type[i] = t >= 1 && t <= 6 ? static_cast<token_type>(t) : token_type::undefined;
    }
  }
  return {};
}

status load_merges(const gguf_file& f, tokenizer_data& d) {
  const auto* merges = f.find("tokenizer.ggml.merges");
  if (!merges)
    return make_error("missing metadata key 'tokenizer.ggml.merges' (needed by a BPE vocabulary)");
  if (merges->type != gguf_value_type::array || merges->array_type != gguf_value_type::string)
    return make_error("metadata key 'tokenizer.ggml.merges' is not an array of strings");
  const auto& arr = merges->as_array();
  d.ranks.by_ids.reserve(arr.size() * 2);
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string& m = arr[i].as_string();
    // Split at the first space after the first byte, like llama.cpp; a merge without one pairs
    // two empty strings, which never match anything.
    const size_t sp = m.find(' ', 1);
    std::string_view left, right;
    if (sp != std::string::npos) {
      left = std::string_view(m).substr(0, sp);
      right = std::string_view(m).substr(sp + 1);
    }
    const int32_t l = d.find(left), r = d.find(right);
    const auto rank = static_cast<int32_t>(i);
    if (l >= 0 && r >= 0)
      d.ranks.by_ids.emplace(detail::bpe_ranks::id_key(l, r), rank);
    else
      d.ranks.by_text.emplace(detail::bpe_ranks::text_key(left, right), rank);
  }
  return {};
}

void find_special_tokens(const gguf_file& f, tokenizer_data& d) {
  const auto n = static_cast<int32_t>(d.text.size());
  if (d.kind == tokenizer_kind::spm) {
    d.bos = 1, d.eos = 2, d.unk = 0;  // SentencePiece's fixed defaults, as in llama.cpp
  }
  // llama.cpp defaults BPE bos/eos to id 11 (a GPT-NeoX leftover); we leave them unset instead.
  read_id(f, "tokenizer.ggml.bos_token_id", n, d.bos);
  read_id(f, "tokenizer.ggml.eos_token_id", n, d.eos);
  read_id(f, "tokenizer.ggml.unknown_token_id", n, d.unk);
  read_id(f, "tokenizer.ggml.padding_token_id", n, d.pad);
  read_id(f, "tokenizer.ggml.eot_token_id", n, d.eot);
  read_id(f, "tokenizer.ggml.eom_token_id", n, d.eom);
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  read_id(f, "tokenizer.ggml.fim_pre_token_id", n, fim_pre);
  read_id(f, "tokenizer.ggml.fim_suf_token_id", n, fim_suf);
  read_id(f, "tokenizer.ggml.fim_mid_token_id", n, fim_mid);
  read_id(f, "tokenizer.ggml.fim_pad_token_id", n, fim_pad);
  read_id(f, "tokenizer.ggml.fim_rep_token_id", n, fim_rep);
  read_id(f, "tokenizer.ggml.fim_sep_token_id", n, fim_sep);

  // A role the metadata left unset goes to the first token bearing one of its names.
  struct role {
    names list;
    int32_t& id;
  };
  role roles[] = {{k_eot_names, d.eot},     {k_eom_names, d.eom},     {k_fim_pre_names, fim_pre},
                  {k_fim_suf_names, fim_suf}, {k_fim_mid_names, fim_mid}, {k_fim_pad_names, fim_pad},
                  {k_fim_rep_names, fim_rep}, {k_fim_sep_names, fim_sep}};
  std::vector<int32_t> eog;
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = d.text[id];
    for (auto& r : roles) {
      if (r.id < 0 && in(t, r.list)) {
        r.id = id;
        d.type[id] = token_type::control;
      }
    }
    if (in(t, k_eog_names)) {
      eog.push_back(id);
      d.type[id] = token_type::control;
    }
  }
  for (int32_t id : {d.eos, d.eot, d.eom, fim_pad, fim_rep, fim_sep})
    if (id >= 0) eog.push_back(id);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  d.eog = std::move(eog);

  for (int32_t id = 0; id < n; ++id) {
    const auto t = d.type[id];
    if (t == token_type::control || t == token_type::user_defined || t == token_type::unknown)
      d.special.push_back(id);
  }
  std::stable_sort(d.special.begin(), d.special.end(),
                   [&](int32_t a, int32_t b) { return d.text[a].size() > d.text[b].size(); });
}

struct fragment {
  int32_t token;  // -1: raw text at [off, off + len)
  size_t off, len;
};

// Splits special tokens out of raw text, longest first, like llama.cpp's
// tokenizer_st_partition. Control and unknown tokens only when `parse_special`, and then only
// inside `spans` when it is given (a match that is not is skipped, and the search goes on one
// byte further, so that a rejected match never hides an accepted one it overlaps).
std::vector<fragment> partition(const tokenizer_data& d, std::string_view text, bool parse_special,
                                const tokenizer::spans* spans) {
  std::vector<fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, 0, text.size()});
  std::vector<fragment> next;
  auto inside_spans = [&](size_t b, size_t e) {
    for (const auto& [sb, se] : *spans)
      if (b >= sb && e <= se) return true;
    return false;
  };
  for (int32_t id : d.special) {
    const auto t = d.type[id];
    const bool control = t == token_type::control || t == token_type::unknown;
    if (!parse_special && control) continue;
    const bool limited = control && spans != nullptr;
    const std::string& s = d.text[id];
    if (text.find(s) == std::string_view::npos) continue;  // the common case: cheap to rule out
    next.clear();
    for (const auto& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const size_t end = f.off + f.len;
      const std::string_view window = text.substr(0, end);
      size_t pos = f.off;
      for (size_t from = pos, m; (m = window.find(s, from)) != std::string_view::npos;) {
        if (limited && !inside_spans(m, m + s.size())) {
          from = m + 1;
          continue;
        }
        if (m > pos) next.push_back({-1, pos, m - pos});
        next.push_back({id, m, s.size()});
        pos = from = m + s.size();
      }
      if (pos < end) next.push_back({-1, pos, end - pos});
    }
    frags.swap(next);
  }
  return frags;
}

}  // namespace

result<tokenizer> tokenizer::from_gguf(const gguf_file& f) {
  auto d = std::make_shared<tokenizer_data>();
  const auto* model = f.find("tokenizer.ggml.model");
  if (!model || model->type != gguf_value_type::string)
    return make_error("missing metadata key 'tokenizer.ggml.model' (the file has no vocabulary)");
  d->model_name = model->as_string();
  if (d->model_name == "gpt2") {
    d->kind = tokenizer_kind::bpe;
  } else if (d->model_name == "llama") {
    d->kind = tokenizer_kind::spm;
  } else {
    return make_error("unsupported tokenizer model '" + d->model_name +
                      "' (supported: gpt2 = byte-level BPE, llama = SentencePiece BPE)");
  }

  if (auto s = load_vocab(f, *d); !s) return make_error(s.error());

  if (d->kind == tokenizer_kind::bpe) {
    if (auto s = load_merges(f, *d); !s) return make_error(s.error());
    const std::string pre_name = f.get_string_or("tokenizer.ggml.pre", "");
    // As llama.cpp: no pre-tokenizer named, its "default" one, with a warning (the text may
    // split otherwise than the model was trained on).
    if (pre_name.empty())
      std::fprintf(stderr, "troupe: warning: %s: no tokenizer.ggml.pre; the 'default' pre-tokenizer splits the text "
                   "(as llama.cpp does), which may not be what the model was trained with\n", f.path().c_str());
    auto config = pretokenizer_config_for(pre_name);
    if (!config) return make_error(config.error());
    auto pre = pretokenizer::compile(config.value());
    if (!pre) return make_error(pre.error());
    d->ignore_merges = config->ignore_merges;
    d->add_bos = config->add_bos;
    d->pre = std::move(pre.value());
  } else {
    d->add_bos = true;
    d->add_space_prefix = true;
  }
  read_flag(f, "tokenizer.ggml.add_bos_token", d->add_bos);
  read_flag(f, "tokenizer.ggml.add_space_prefix", d->add_space_prefix);

  find_special_tokens(f, *d);

  d->byte_token.fill(-1);
  if (d->kind == tokenizer_kind::spm) {
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
      int32_t id = d->find(name);
      if (id < 0) id = d->find(std::string(1, static_cast<char>(b)));
      d->byte_token[b] = id >= 0 ? id : d->unk;
    }
  }

  d->piece.resize(d->text.size());
  for (size_t i = 0; i < d->text.size(); ++i) d->piece[i] = make_piece(*d, static_cast<int32_t>(i));
  return tokenizer(std::move(d));
}

std::vector<int32_t> tokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  return encode_impl(text, add_bos, parse_special, nullptr);
}

std::vector<int32_t> tokenizer::encode_impl(std::string_view text, bool add_bos, bool parse_special,
                                            const spans* special_spans) const {
  const auto& d = *d_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && d.bos >= 0) out.push_back(d.bos);
  const auto frags = partition(d, text, parse_special, special_spans);

  if (d.kind == tokenizer_kind::bpe) {
    const auto& alpha = detail::byte_level_alphabet::get();
    detail::bpe_scratch scratch;
    std::string repaired, word;
    for (const auto& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      std::string_view raw = text.substr(f.off, f.len);
      if (detail::find_invalid_utf8(raw) != std::string_view::npos) {
        repaired = detail::replace_invalid_utf8(raw);
        raw = repaired;
      }
      for (auto w : d.pre->split(raw)) {
        word.clear();
        for (unsigned char c : w) word += alpha.encode[c];
        detail::bpe_encode_word(d, word, scratch, out);
      }
    }
    return out;
  }

  // SentencePiece: text after a special token (or at the start) gets the space prefix.
  bool after_special = true;
  for (const auto& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    std::string s;
    if (d.add_space_prefix && after_special) s = " ";
    s.append(text.substr(f.off, f.len));
    detail::spm_encode(d, replace_all(s, " ", k_spm_space), out);
    after_special = false;
  }
  return out;
}

result<std::vector<int32_t>> tokenizer::encode_checked(std::string_view text, bool add_bos,
                                                       bool parse_special) const {
  const size_t bad = detail::find_invalid_utf8(text);
  if (bad != std::string_view::npos)
    return make_error("invalid UTF-8 at byte offset " + std::to_string(bad));
  return encode(text, add_bos, parse_special);
}

result<std::vector<int32_t>> tokenizer::encode_checked(std::string_view text, bool add_bos,
                                                       const spans& special_spans) const {
  const size_t bad = detail::find_invalid_utf8(text);
  if (bad != std::string_view::npos)
    return make_error("invalid UTF-8 at byte offset " + std::to_string(bad));
  return encode_impl(text, add_bos, true, &special_spans);
}

std::string tokenizer::token_to_piece(int32_t id, bool render_special) const {
  const auto& d = *d_;
  if (id < 0 || id >= n_vocab()) return {};
  const auto t = d.type[id];
  if (!render_special && (t == token_type::control || t == token_type::unknown)) return {};
  return d.piece[id];
}

std::string tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string out;
  bool strip_space = d_->add_space_prefix;
  for (int32_t id : ids) {
    std::string p = token_to_piece(id, render_special);
    if (p.empty()) continue;
    if (strip_space && p[0] == ' ') p.erase(0, 1);
    strip_space = false;
    out += p;
  }
  return out;
}

int32_t tokenizer::n_vocab() const { return static_cast<int32_t>(d_->text.size()); }

const std::string& tokenizer::token_text(int32_t id) const {
  static const std::string empty;
  return id >= 0 && id < n_vocab() ? d_->text[id] : empty;
}

token_type tokenizer::type(int32_t id) const {
  return id >= 0 && id < n_vocab() ? d_->type[id] : token_type::undefined;
}

int32_t tokenizer::find_token(std::string_view text) const { return d_->find(text); }

int32_t tokenizer::bos() const { return d_->bos; }
int32_t tokenizer::eos() const { return d_->eos; }
int32_t tokenizer::unk() const { return d_->unk; }
int32_t tokenizer::pad() const { return d_->pad; }

bool tokenizer::is_eog(int32_t id) const {
  return std::binary_search(d_->eog.begin(), d_->eog.end(), id);
}
const std::vector<int32_t>& tokenizer::eog_ids() const { return d_->eog; }

bool tokenizer::add_bos_default() const { return d_->add_bos; }
bool tokenizer::add_space_prefix() const { return d_->add_space_prefix; }
tokenizer_kind tokenizer::kind() const { return d_->kind; }
const std::string& tokenizer::model_name() const { return d_->model_name; }
const std::string& tokenizer::pre_name() const {
  static const std::string none;
  return d_->pre ? d_->pre->config().name : none;
}

}  // namespace troupe::model
