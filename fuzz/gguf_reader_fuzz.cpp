// Fuzzes the GGUF reader (model/gguf_reader.cpp) with arbitrary file images, and what reads a
// model's metadata from it before any weight is touched: the tokenizer (tokenizer::from_gguf)
// and the chat template (chat_template::from_gguf). Invariants: no crash; a refusal says why;
// every tensor's bytes lie inside the image (each tensor's first and last bytes are read, so
// AddressSanitizer sees any that do not); every getter answers or names the key.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz/fuzz_check.hpp"
#include "model/chat_template.hpp"
#include "model/gguf_reader.hpp"
#include "model/tokenizer.hpp"

using namespace troupe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = model::gguf_file::from_bytes(std::vector<uint8_t>(data, data + size));
  if (!f.ok()) {
    FUZZ_CHECK(!f.error().empty());
    return 0;
  }
  const auto& file = *f.value();
  volatile uint8_t sink = 0;
  for (const auto& t : file.tensors()) {
    FUZZ_CHECK(file.tensor(t.name) != nullptr);
    if (t.bytes > 0) {
      FUZZ_CHECK(t.data != nullptr);
      sink = sink + t.data[0] + t.data[t.bytes - 1];
    }
  }
  for (const auto& [key, v] : file.metadata()) {
    FUZZ_CHECK(file.find(key) == &v);
    // Each getter: a value of the right type, or an error naming the key.
    auto s = file.get_string(key);
    if (!s.ok()) FUZZ_CHECK(s.error().find(key) != std::string::npos);
    auto i = file.get_int(key);
    if (!i.ok()) FUZZ_CHECK(i.error().find(key) != std::string::npos);
    (void)file.get_float(key);
    (void)file.get_bool(key);
    (void)file.get_string_array(key);
    (void)file.get_float_array(key);
    (void)file.get_int_array(key);
  }
  auto tok = model::tokenizer::from_gguf(file);
  if (tok.ok()) {
    const auto ids = tok.value().encode("Hello, world! <|im_start|> \xf0\x9f\x98\x80", true, true);
    for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < tok.value().n_vocab());
    (void)tok.value().decode(ids, true);
  } else {
    FUZZ_CHECK(!tok.error().empty());
  }
  const auto tmpl = model::chat_template::from_gguf(file);
  (void)tmpl.render({{"system", "s"}, {"user", "u"}, {"assistant", "a"}, {"user", "v"}}, true);
  return 0;
}
