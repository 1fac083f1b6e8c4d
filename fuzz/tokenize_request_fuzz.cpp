// Fuzzes the /tokenize and /detokenize decoders (net/tokenize_codec.cpp) with the same bodies.
// Invariants: no crash; a refusal is a 4xx with a message; an accepted /tokenize body's content
// and an accepted /detokenize body's ids, written back by tokenize_json / detokenize_json (the
// content may hold any bytes), give valid JSON with as many tokens.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_json.hpp"
#include "net/tokenize_codec.hpp"

using namespace troupe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  simdjson::dom::parser p;
  const auto t = net::parse_tokenize_request(body);
  if (!t.query) {
    FUZZ_CHECK(t.error.status >= 400 && t.error.status < 500 && !t.error.message.empty());
  } else {
    // As if each byte of the content were a token, its piece that byte: pieces that are not valid
    // UTF-8 on their own are written as byte arrays.
    net::tokenized tk;
    for (size_t i = 0; i < t.query->content.size() && i < 64; ++i) {
      tk.tokens.push_back(static_cast<unsigned char>(t.query->content[i]));
      if (t.query->with_pieces) tk.pieces.push_back(t.query->content.substr(i, 1));
    }
    simdjson::dom::array arr;
    FUZZ_CHECK(!fuzz::must_be_object(p, net::tokenize_json(tk))["tokens"].get(arr));
    FUZZ_CHECK(arr.size() == tk.tokens.size());
    fuzz::must_be_object(p, net::detokenize_json(t.query->content));
  }
  const auto d = net::parse_detokenize_request(body);
  if (!d.tokens) FUZZ_CHECK(d.error.status >= 400 && d.error.status < 500 && !d.error.message.empty());
  return 0;
}
