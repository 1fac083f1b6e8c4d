// Fuzzes the streaming detokenizer (model/detokenizer.cpp) on the fixtures' vocabularies. Input:
// one byte of flags (vocabulary, render_special), then ids, two bytes each (some past the
// vocabulary, and negative ones). Invariants: every string push() and flush() return is valid
// UTF-8 on its own; when the whole decode is valid UTF-8, the pushes and the flush put
// together are exactly it (nothing lost, nothing added); after flush the detokenizer starts
// afresh (the same ids give the same text again).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_vocab.hpp"
#include "model/detokenizer.hpp"

using namespace troupe;

namespace {

std::string stream(model::detokenizer& d, const std::vector<int32_t>& ids) {
  std::string all;
  for (int32_t id : ids) {
    const std::string piece = d.push(id);
    FUZZ_CHECK(fuzz::valid_utf8(piece));
    all += piece;
  }
  const std::string rest = d.flush();
  FUZZ_CHECK(fuzz::valid_utf8(rest));
  FUZZ_CHECK(d.pending_bytes() == 0);
  return all + rest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& vocabs = fuzz::vocabularies();
  const auto& tok = vocabs[data[0] % vocabs.size()];
  model::detokenizer::options opt;
  opt.render_special = data[0] & 0x10;
  const int32_t n = tok.n_vocab();
  std::vector<int32_t> ids;
  for (size_t i = 1; i + 1 < size; i += 2) {
    const int32_t v = static_cast<int32_t>(data[i] | (data[i + 1] << 8));
    ids.push_back(v >= 0xFFF0 ? -(v - 0xFFF0) - 1 : v % (n + 16));
  }
  model::detokenizer d(tok, opt);
  const std::string first = stream(d, ids);
  const std::string whole = tok.decode(ids, opt.render_special);
  if (fuzz::valid_utf8(whole)) FUZZ_CHECK(first == whole);
  FUZZ_CHECK(stream(d, ids) == first);
  return 0;
}
