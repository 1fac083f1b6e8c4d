#pragma once
// BERT's basic tokenization for uncased models, as Hugging Face's BertNormalizer and
// BertPreTokenizer do it (the reference vectors and the embedder's own training used them):
// drop control and unassigned characters, whitespace to ' ', spaces around CJK ideographs,
// accents stripped (NFD, nonspacing marks dropped), lowercased; then split on whitespace and
// around every punctuation character. Invalid UTF-8 bytes are dropped like U+FFFD.
#include <string>
#include <string_view>
#include <vector>

namespace troupe::cache {

// The normalised text, still unsplit.
std::string bert_normalize(std::string_view text);

// The words and punctuation marks of the normalised text, in order.
std::vector<std::string> bert_basic_split(std::string_view text);

}  // namespace troupe::cache
