#pragma once
// Chat prompts without a Jinja engine: recognise the family of a model's
// `tokenizer.chat_template` and render it natively, producing what that Jinja template produces
// for plain text messages.
//
// Families: ChatML (<|im_start|>; SmolLM2, Qwen2 — including the default system prompt the
// template inserts when the conversation has none), Llama 2 ([INST] with <<SYS>>), Llama 3
// (<|start_header_id|>; with the 3.1+ "Cutting Knowledge Date" system preamble when the
// template has it) and Mistral ([INST] without <<SYS>>). Anything else falls back to ChatML
// with a warning. Tools, images and reasoning fields are not rendered.
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace troupe::model {

class gguf_file;

struct chat_message {
  std::string role;  // "system", "user", "assistant" (others pass through where the format allows)
  std::string content;
  // The participant's name (OpenAI's message `name`), or empty. ChatML writes it in the turn's
  // header as its own documents do ("<|im_start|>user name=alice"); the other families have no
  // place for it and write it in front of the content ("alice: ...").
  std::string name;
};

// A part of a rendered prompt: the template's own text (role markers, bos/eos, the default
// system prompt) or a message's content. A message's text spelling a special token must stay
// text (or a user could forge a role); only the template's may be read as special tokens.
struct prompt_piece {
  std::string text;
  bool from_template = false;
};

enum class chat_family { chatml, llama2, llama3, mistral };
const char* to_string(chat_family f);

class chat_template {
 public:
  // Recognises `template_text` (empty when the model has none). `model_name` only goes into the
  // warning; `bos_text`/`eos_text` are the texts of the model's bos/eos tokens, which some
  // templates write into the prompt.
  static chat_template detect(std::string_view template_text, std::string_view model_name = {},
                              std::string bos_text = {}, std::string eos_text = {});
  // Reads tokenizer.chat_template, general.name and the bos/eos token texts from the file.
  static chat_template from_gguf(const gguf_file& file);

  chat_family family() const { return family_; }
  // Why the template fell back to ChatML, naming the model; empty when it was recognised.
  const std::string& warning() const { return warning_; }
  // ChatML templates that insert a system prompt when the conversation has none.
  const std::string& default_system_prompt() const { return default_system_; }

  // The prompt, bos/eos token texts included where the template writes them. Errors where the
  // Jinja template raises one (e.g. Llama 2 and Mistral require user/assistant turns to
  // alternate). Tokenizing it whole with parse_special would read special-token text in the
  // messages too: tokenize render_pieces() instead, specials only in the template's pieces
  // (tokenizer::encode_checked with spans, as actors/text_codec does).
  result<std::string> render(const std::vector<chat_message>& messages,
                             bool add_generation_prompt) const;
  // The same prompt as pieces (their texts joined are render()'s), template text apart from the
  // messages' contents; adjacent pieces of one kind are merged, empty ones left out.
  result<std::vector<prompt_piece>> render_pieces(const std::vector<chat_message>& messages,
                                                  bool add_generation_prompt) const;

 private:
  using pieces = std::vector<prompt_piece>;
  result<pieces> render_chatml(const std::vector<chat_message>& m, bool gen) const;
  result<pieces> render_llama2(const std::vector<chat_message>& m) const;
  result<pieces> render_llama3(const std::vector<chat_message>& m, bool gen) const;
  result<pieces> render_mistral(const std::vector<chat_message>& m) const;

  chat_family family_ = chat_family::chatml;
  std::string warning_;
  std::string default_system_;
  std::string bos_, eos_;
  bool llama3_dated_preamble_ = false;  // Llama 3.1+: "Cutting Knowledge Date" system block
  std::string llama3_cutoff_, llama3_date_;
};

}  // namespace troupe::model
