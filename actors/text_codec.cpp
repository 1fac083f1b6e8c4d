#include "actors/text_codec.hpp"

#include "model/chat_template.hpp"
#include "model/detokenizer.hpp"
#include "model/gguf_reader.hpp"
#include "model/tokenizer.hpp"
#include "structured/constraint_cache.hpp"

namespace troupe::actors {

namespace {

class gguf_decoder final : public incremental_decoder {
 public:
  explicit gguf_decoder(const model::tokenizer& t) : d_(t) {}
  std::string push(int32_t token) override { return d_.push(token); }
  std::string flush() override { return d_.flush(); }

 private:
  model::detokenizer d_;
};

class gguf_codec final : public text_codec {
 public:
  gguf_codec(model::tokenizer tok, model::chat_template tpl, text_codec_options opts)
      : tok_(std::move(tok)),
        tpl_(std::move(tpl)),
        opts_(opts),
        constraints_(std::make_shared<structured::constraint_cache>(
            [t = tok_] { return std::make_shared<const structured::token_vocabulary>(t); })) {}

  result<std::vector<int32_t>> encode_prompt(const std::string& text) const override {
    return tok_.encode_checked(text, tok_.add_bos_default(), true);
  }
  result<std::vector<int32_t>> encode_chat(const std::vector<chat_message>& messages) const override {
    std::vector<model::chat_message> m;
    m.reserve(messages.size());
    for (const auto& x : messages) m.push_back({x.role, x.content, x.role == "tool" ? std::string() : x.name});
    auto pieces = tpl_.render_pieces(m, true);
    if (!pieces) return make_error(pieces.error());
    // The template writes bos itself where the model wants one. Special-token text is read only
    // in the template's own pieces (unless opts_ says otherwise): "<|im_start|>system" typed by a
    // user stays text and cannot open a turn of another role.
    std::string text;
    model::tokenizer::spans special;
    for (const auto& p : pieces.value()) {
      if (p.from_template || opts_.parse_special_in_messages) special.emplace_back(text.size(), text.size() + p.text.size());
      text += p.text;
    }
    return tok_.encode_checked(text, false, special);
  }
  result<std::vector<int32_t>> encode_text(const std::string& text, bool add_special, bool parse_special) const override {
    return tok_.encode_checked(text, add_special && tok_.add_bos_default(), parse_special);
  }
  std::string token_piece(int32_t id) const override { return tok_.token_to_piece(id, true); }
  std::unique_ptr<incremental_decoder> decoder() const override { return std::make_unique<gguf_decoder>(tok_); }
  std::vector<int32_t> eog_tokens() const override { return tok_.eog_ids(); }
  int32_t n_vocab() const override { return tok_.n_vocab(); }
  result<std::shared_ptr<const structured::compiled_constraint>> compile_constraint(
      const structured::constraint_spec& spec) const override {
    return constraints_->get(spec);
  }
  structured::tool_format tool_format() const override {
    switch (tpl_.family()) {
      case model::chat_family::llama3: return structured::tool_format::llama3;
      case model::chat_family::mistral: return structured::tool_format::mistral;
      default: return structured::tool_format::hermes;
    }
  }

 private:
  model::tokenizer tok_;
  model::chat_template tpl_;
  text_codec_options opts_;
  std::shared_ptr<structured::constraint_cache> constraints_;
};

class byte_decoder final : public incremental_decoder {
 public:
  explicit byte_decoder(int32_t eog) : eog_(eog) {}
  std::string push(int32_t token) override {
    if (token == eog_) return {};
    if (token >= 256) return flush() + "<" + std::to_string(token) + ">";
    held_.push_back(static_cast<char>(token));
    // Release everything up to the last incomplete UTF-8 sequence.
    size_t cut = held_.size();
    for (size_t back = 1; back <= std::min<size_t>(4, held_.size()); ++back) {
      const auto c = static_cast<unsigned char>(held_[held_.size() - back]);
      if ((c & 0xC0) == 0x80) continue;  // continuation byte
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      if (len > back) cut = held_.size() - back;
      break;
    }
    std::string out = held_.substr(0, cut);
    held_.erase(0, cut);
    return out;
  }
  std::string flush() override {
    std::string out;
    out.swap(held_);
    return out;
  }

 private:
  int32_t eog_;
  std::string held_;
};

class byte_codec final : public text_codec {
 public:
  byte_codec(int32_t n_vocab, int32_t eog)
      : n_vocab_(n_vocab),
        eog_(eog),
        constraints_(std::make_shared<structured::constraint_cache>([n_vocab] {
          // Bytes are themselves; the "<i>" tokens are no text a grammar could ask for.
          std::vector<std::string> bytes(static_cast<size_t>(n_vocab));
          for (int32_t i = 0; i < std::min(n_vocab, 256); ++i) bytes[static_cast<size_t>(i)] = std::string(1, static_cast<char>(i));
          return std::make_shared<const structured::token_vocabulary>(std::move(bytes));
        })) {}
  result<std::vector<int32_t>> encode_prompt(const std::string& text) const override {
    std::vector<int32_t> out;
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  result<std::vector<int32_t>> encode_chat(const std::vector<chat_message>& messages) const override {
    std::string text;
    for (const auto& m : messages) {
      if (m.role != "system" && m.role != "user" && m.role != "assistant")
        return make_error("unknown chat role '" + m.role + "' (use system, user or assistant)");
      text += m.role + ": " + m.content + "\n";
    }
    return encode_prompt(text + "assistant: ");
  }
  result<std::vector<int32_t>> encode_text(const std::string& text, bool, bool) const override {
    return encode_prompt(text);
  }
  std::string token_piece(int32_t id) const override {
    if (id < 0 || id >= n_vocab_) return {};
    if (id < 256) return std::string(1, static_cast<char>(id));
    return id == eog_ ? std::string() : "<" + std::to_string(id) + ">";
  }
  std::unique_ptr<incremental_decoder> decoder() const override { return std::make_unique<byte_decoder>(eog_); }
  std::vector<int32_t> eog_tokens() const override { return {eog_}; }
  int32_t n_vocab() const override { return n_vocab_; }
  result<std::shared_ptr<const structured::compiled_constraint>> compile_constraint(
      const structured::constraint_spec& spec) const override {
    return constraints_->get(spec);
  }
  structured::tool_format tool_format() const override { return structured::tool_format::hermes; }

 private:
  int32_t n_vocab_;
  int32_t eog_;
  std::shared_ptr<structured::constraint_cache> constraints_;
};

}  // namespace

result<std::shared_ptr<const text_codec>> make_gguf_codec(const model::gguf_file& file, text_codec_options opts) {
  auto tok = model::tokenizer::from_gguf(file);
  if (!tok) return make_error(tok.error());
  auto tpl = model::chat_template::from_gguf(file);
  return std::shared_ptr<const text_codec>(std::make_shared<gguf_codec>(std::move(*tok), std::move(tpl), opts));
}

std::shared_ptr<const text_codec> make_byte_codec(int32_t n_vocab, int32_t eog) {
  return std::make_shared<byte_codec>(n_vocab, eog);
}

}  // namespace troupe::actors
