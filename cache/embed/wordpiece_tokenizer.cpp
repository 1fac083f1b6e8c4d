#include "cache/embed/wordpiece_tokenizer.hpp"

#include <algorithm>
#include <fstream>

#include "cache/embed/bert_text.hpp"
#include "model/gguf_reader.hpp"

namespace troupe::cache {

namespace {
constexpr size_t k_max_word_chars = 100;  // BERT's max_input_chars_per_word
const std::string k_continuation = "##";

bool is_utf8_lead(char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }
}  // namespace

result<wordpiece_tokenizer> wordpiece_tokenizer::from_vocab_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open vocabulary " + path);
  std::vector<std::string> tokens;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    tokens.push_back(std::move(line));
  }
  auto r = from_tokens(std::move(tokens));
  if (!r) return make_error(path + ": " + r.error());
  return r;
}

result<wordpiece_tokenizer> wordpiece_tokenizer::from_tokens(std::vector<std::string> tokens) {
  wordpiece_tokenizer t;
  t.tokens_ = std::move(tokens);
  t.ids_.reserve(t.tokens_.size());
  for (size_t i = 0; i < t.tokens_.size(); ++i) {
    const std::string& tok = t.tokens_[i];
    t.ids_.emplace(tok, static_cast<int32_t>(i));  // the first of any duplicates wins
    size_t len = tok.size();
    if (tok.compare(0, k_continuation.size(), k_continuation) == 0) len -= k_continuation.size();
    t.longest_ = std::max(t.longest_, len);
  }
  t.cls_ = t.id_of("[CLS]");
  t.sep_ = t.id_of("[SEP]");
  t.unk_ = t.id_of("[UNK]");
  if (t.cls_ < 0 || t.sep_ < 0 || t.unk_ < 0)
    return make_error("vocabulary lacks [CLS], [SEP] or [UNK] (" + std::to_string(t.tokens_.size()) + " tokens)");
  return t;
}

result<wordpiece_tokenizer> wordpiece_tokenizer::from_gguf(const model::gguf_file& file) {
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model) return make_error(model.error());
  if (model.value() != "bert") return make_error("tokenizer.ggml.model is '" + model.value() + "', not 'bert'");
  auto toks = file.get_string_array("tokenizer.ggml.tokens");
  if (!toks) return make_error(toks.error());
  static const std::string phantom_space = "\xE2\x96\x81";  // U+2581
  for (auto& t : toks.value()) {
    if (t.compare(0, phantom_space.size(), phantom_space) == 0) {
      t.erase(0, phantom_space.size());
    } else if (!(t.size() > 2 && t.front() == '[' && t.back() == ']')) {
      t.insert(0, k_continuation);
    }
  }
  return from_tokens(std::move(toks.value()));
}

int32_t wordpiece_tokenizer::id_of(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

void wordpiece_tokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  const size_t n_chars = static_cast<size_t>(std::count_if(word.begin(), word.end(), is_utf8_lead));
  if (n_chars > k_max_word_chars) {
    out.push_back(unk_);
    return;
  }
  const size_t first = out.size();
  std::string piece;
  for (size_t start = 0; start < word.size();) {
    int32_t found = -1;
    size_t found_end = start;
    // Longest match first; ends only on character boundaries.
    for (size_t end = std::min(word.size(), start + longest_); end > start; --end) {
      if (end < word.size() && !is_utf8_lead(word[end])) continue;
      piece.assign(start == 0 ? "" : k_continuation);
      piece.append(word, start, end - start);
      auto it = ids_.find(piece);
      if (it != ids_.end()) {
        found = it->second;
        found_end = end;
        break;
      }
    }
    if (found < 0) {
      out.resize(first);
      out.push_back(unk_);
      return;
    }
    out.push_back(found);
    start = found_end;
  }
}

std::vector<int32_t> wordpiece_tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for (const auto& w : bert_basic_split(text)) encode_word(w, ids);
  return ids;
}

std::vector<int32_t> wordpiece_tokenizer::encode_for_model(std::string_view text, size_t max_tokens) const {
  max_tokens = std::max<size_t>(max_tokens, 2);
  std::vector<int32_t> ids{cls_};
  for (const auto& w : bert_basic_split(text)) {
    encode_word(w, ids);
    if (ids.size() >= max_tokens - 1) break;  // the rest would be cut anyway
  }
  if (ids.size() > max_tokens - 1) ids.resize(max_tokens - 1);
  ids.push_back(sep_);
  return ids;
}

}  // namespace troupe::cache
