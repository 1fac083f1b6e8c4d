#include "model/loaded_model.hpp"

#include <sys/stat.h>

namespace troupe::model {

result<std::shared_ptr<loaded_model>> loaded_model::load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error("model file '" + path + "' not found; run scripts/fetch-model.sh to fetch the default model, "
                      "or pass --model with the path of a Llama-family GGUF file");
  auto file = gguf_file::open(path);
  if (!file)
    return make_error(file.error() + " — the file is not a usable GGUF model; if it is the default model, "
                      "run scripts/fetch-model.sh to fetch it again");
  auto weights = llama_model::load(file.value());
  if (!weights) return make_error(weights.error());
  auto tok = tokenizer::from_gguf(*file.value());
  if (!tok) return make_error(path + ": " + tok.error());
  auto m = std::make_shared<loaded_model>(loaded_model{path, "", weights.value(), tok.value(),
                                                       chat_template::from_gguf(*file.value())});
  auto slash = path.find_last_of('/');
  m->id = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (m->id.size() > 5 && m->id.compare(m->id.size() - 5, 5, ".gguf") == 0) m->id.resize(m->id.size() - 5);
  return m;
}

result<std::vector<int32_t>> loaded_model::encode_chat(const std::vector<chat_message>& messages) const {
  if (messages.empty()) return make_error("no messages");
  auto text = chat.render(messages, /*add_generation_prompt=*/true);
  if (!text) return make_error(text.error());
  auto ids = vocab.encode_checked(text.value(), /*add_bos=*/false, /*parse_special=*/true);
  if (!ids) return make_error("chat messages: " + ids.error());
  return ids;
}

result<std::vector<int32_t>> loaded_model::encode_prompt(const std::string& text) const {
  if (text.empty()) return make_error("the prompt is empty");
  auto ids = vocab.encode_checked(text, vocab.add_bos_default(), /*parse_special=*/false);
  if (!ids) return make_error("prompt: " + ids.error());
  if (ids->empty()) return make_error("the prompt has no tokens");
  return ids;
}

}  // namespace troupe::model
