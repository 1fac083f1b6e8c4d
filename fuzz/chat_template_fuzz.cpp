// Fuzzes chat-template rendering (model/chat_template.cpp) with arbitrary messages and
// templates. Input: a byte picking the template (the four families' real Jinja texts, or the
// input's own first line as the template text), a byte of flags, then messages separated by
// '\x1e', each a role byte (system, user, assistant, tool, or its own role text up to '\x1f')
// and its content. Invariants: no crash; a refusal says why; a rendered ChatML prompt holds each
// message's content byte for byte, in order (the other families strip contents, as their
// Jinja templates do).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.hpp"
#include "model/chat_template.hpp"

using namespace troupe;

namespace {

// Abridged from the models' tokenizer.chat_template: detect() recognises a family by its markers.
const char* const templates[] = {
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}",
    "{% if messages[0]['role'] == 'system' %}<<SYS>>\\n{% endif %}{{ bos_token + '[INST] ' + "
    "content.strip() + ' [/INST]' }}",
    "{{- bos_token }}{% set date_string = '26 Jul 2024' %}Cutting Knowledge Date: December 2023"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>",
    "{{ bos_token }}{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}",
};
const char* const roles[] = {"system", "user", "assistant", "tool"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  std::string tmpl_text;
  const unsigned pick = data[0] % 5;
  if (pick < 4) {
    tmpl_text = templates[pick];
  } else {
    const auto nl = rest.find('\n');
    tmpl_text = std::string(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  const bool gen = data[1] & 1;
  const auto tmpl = model::chat_template::detect(tmpl_text, "fuzz", data[1] & 2 ? "<s>" : "", data[1] & 4 ? "</s>" : "");

  std::vector<model::chat_message> messages;
  while (!rest.empty() && messages.size() < 64) {
    const auto end = rest.find('\x1e');
    std::string_view m = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    model::chat_message msg;
    if (!m.empty() && static_cast<unsigned char>(m[0]) < 4) {
      msg.role = roles[static_cast<unsigned char>(m[0])];
      m.remove_prefix(1);
    } else {
      const auto sep = m.find('\x1f');
      msg.role = std::string(m.substr(0, sep));
      m = sep == std::string_view::npos ? std::string_view() : m.substr(sep + 1);
    }
    msg.content = std::string(m);
    messages.push_back(std::move(msg));
  }

  const auto out = tmpl.render(messages, gen);
  if (!out.ok()) {
    FUZZ_CHECK(!out.error().empty());
    return 0;
  }
  if (tmpl.family() == model::chat_family::chatml) {
    size_t at = 0;
    for (const auto& m : messages) {
      const auto found = out.value().find(m.content, at);
      FUZZ_CHECK(found != std::string::npos);
      at = found + m.content.size();
    }
  }
  return 0;
}
