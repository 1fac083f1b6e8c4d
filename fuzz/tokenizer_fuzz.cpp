// Fuzzes tokenizer encode/decode (model/tokenizer.cpp) on the fixtures' vocabularies (SmolLM2
// byte-level BPE, Llama 2 SentencePiece, GPT-2). Input: one byte of flags (vocabulary, add_bos,
// parse_special), then the text. Invariants:
// - every id encode gives is in the vocabulary;
// - encode_checked refuses exactly the ill-formed UTF-8 texts;
// - round trip: decode(encode(text)) == text for well-formed text (special tokens rendered when
//   they were parsed from the text; bos, which was not in it, dropped), except SentencePiece
//   with special tokens parsed, which adds a space after each, as llama.cpp does, and bytes the
//   vocabulary has no token for (ASCII or not), which are dropped, as llama.cpp does;
// - the same text tokenized again from decode(ids) of arbitrary ids decodes to the same text
//   (encode(decode(x)) may choose other ids, but the text is the same);
// - decode never crashes on any id, in the vocabulary or not.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_vocab.hpp"
#include "model/detail/tokenizer_utf8.hpp"

using namespace troupe;

namespace {

// For each vocabulary of fuzz::vocabularies(), whether a byte alone survives encoding (see the
// round trip below). Worked out once per process: asking per input byte cost a one-byte encode
// for every byte of every input (most of a SentencePiece input's time).
const std::array<bool, 256>& byte_has_token(size_t vocab) {
  static const std::vector<std::array<bool, 256>> known = [] {
    const auto& alphabet = model::detail::byte_level_alphabet::get();
    std::vector<std::array<bool, 256>> out;
    for (const auto& tok : fuzz::vocabularies()) {
      std::array<bool, 256> k{};
      for (int b = 0; b < 256; ++b) {
        const char c = static_cast<char>(b);
        // Byte-level BPE spells each byte with one character of GPT-2's alphabet; elsewhere a
        // byte >= 0x80 is part of a code point (or an invalid byte, which never gets here).
        k[b] = tok.kind() == model::tokenizer_kind::bpe ? tok.find_token(alphabet.encode[b]) >= 0
                                                         : b >= 0x80 || !tok.encode(std::string_view(&c, 1)).empty();
      }
      out.push_back(k);
    }
    return out;
  }();
  return known[vocab];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& vocabs = fuzz::vocabularies();
  const uint8_t flags = data[0];
  const auto& tok = vocabs[flags % vocabs.size()];
  const bool add_bos = flags & 0x10;
  const bool parse_special = flags & 0x20;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const int32_t n = tok.n_vocab();

  const auto ids = tok.encode(text, add_bos, parse_special);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < n);
  const bool well_formed = fuzz::valid_utf8(text);
  const auto checked = tok.encode_checked(text, add_bos, parse_special);
  FUZZ_CHECK(checked.ok() == well_formed);
  if (checked.ok()) FUZZ_CHECK(checked.value() == ids);

  // SentencePiece with parse_special: like llama.cpp, the text after each special token gets the
  // vocabulary's space prefix again, so a space comes back there; only the rest round-trips.
  const bool spm_specials = parse_special && tok.kind() == model::tokenizer_kind::spm;
  if (well_formed && !spm_specials) {
    const std::string back = tok.decode(ids, /*render_special=*/parse_special);
    // With add_bos the bos token's text comes back too when rendered: it was not in the text.
    // A byte the vocabulary has no token for is dropped, as llama.cpp does: it cannot come back.
    // Byte-level BPE spells each byte with one character of GPT-2's alphabet, and SmolLM2 has
    // none for a few ASCII control bytes (0x06) nor for some lead bytes of code points it never
    // saw (0xF2, of U+9F600). Elsewhere an ASCII byte alone that encodes to nothing.
    const auto& known = byte_has_token(flags % vocabs.size());
    std::string expect;
    for (char c : text)
      if (known[static_cast<unsigned char>(c)]) expect += c;
    if (add_bos && parse_special && tok.bos() >= 0 && !ids.empty() && ids[0] == tok.bos())
      expect = tok.token_to_piece(tok.bos(), true) + expect;
    if (back != expect) {
      std::fprintf(stderr, "round trip: %zu bytes in, %zu bytes back\n", expect.size(), back.size());
      fuzz::broken("decode(encode(text)) == text", __FILE__, __LINE__);
    }
  }

  // The same bytes read as ids (two bytes each, some past the vocabulary).
  std::vector<int32_t> raw;
  for (size_t i = 1; i + 1 < size; i += 2)
    raw.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8)) % (n + 16)));
  const std::string t = tok.decode(raw);
  if (fuzz::valid_utf8(t)) FUZZ_CHECK(tok.decode(tok.encode(t)) == t);
  return 0;
}
