#include "cache/semantic/question_guard.hpp"

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/embed/bert_text.hpp"

namespace troupe::cache {

namespace {

const std::unordered_set<std::string>& closed_class_words() {
  static const std::unordered_set<std::string> words = {
      "a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "done",
      "i", "me", "my", "mine", "we", "us", "our", "you", "your", "it", "its", "he", "she", "they", "them",
      "their", "this", "that", "these", "those", "there", "here", "what", "which", "who", "whom", "whose",
      "how", "why", "when", "where", "can", "could", "would", "should", "will", "shall", "may", "might", "must",
      "please", "of", "in", "on", "at", "by", "to", "and", "s", "t", "d", "ll", "ve", "re", "m", "tell", "give",
      "explain", "describe", "show", "let", "some", "any", "just", "also", "very", "really"};
  return words;
}

// Words that turn a question into its opposite ("not red", "no rings", "never take"). After
// contractions are spelt out (see spelt_out), so "isn't", "isnt" and "is not" all count one "not".
// Also the words that exclude ("a country outside Europe", "animals that live out of water",
// "fruit other than apples", "all except one"): added to a question they flip its answer as a
// "not" does, where the embedding barely moves (0.945 and 0.964 for the first two). A guard errs
// towards a miss: "find out" or "other" in a harmless sense only costs a fresh answer.
const std::unordered_set<std::string>& negation_words() {
  static const std::unordered_set<std::string> words = {
      "not",     "no",     "never",   "none",    "nothing",  "nobody",   "nowhere", "neither", "nor",
      "without", "outside", "out",    "except",  "excluding", "exclude", "excludes", "besides", "other",
      "unlike",  "instead", "apart",  "beyond",  "opposite"};
  return words;
}

// Contractions written with or without the apostrophe, as their two words. With it, BERT's split
// gives "isn" "'" "t"; the key is the part before the apostrophe. "can't" splits as "can" "t".
const std::unordered_map<std::string, std::string>& negated_auxiliaries() {
  static const std::unordered_map<std::string, std::string> words = {
      {"isn", "is"},        {"aren", "are"},       {"wasn", "was"},     {"weren", "were"},   {"don", "do"},
      {"doesn", "does"},    {"didn", "did"},       {"hasn", "has"},     {"haven", "have"},   {"hadn", "had"},
      {"couldn", "could"},  {"shouldn", "should"}, {"wouldn", "would"}, {"mustn", "must"},   {"needn", "need"},
      {"mightn", "might"},  {"can", "can"},        {"won", "will"},     {"shan", "shall"},   {"ain", "is"}};
  return words;
}

// Number words count as the numbers they name, so "two apples" and "2 apples" agree and "a fruit"
// vs "three fruits" differs. Compounds ("twenty five") become two numbers: a miss against "25",
// never a false hit. Not "one", which is mostly a pronoun ("which one", "one line at a time" for
// "line by line"); ordinals stay content words ("second" is also a unit of time).
const std::unordered_map<std::string, std::string>& number_words() {
  static const std::unordered_map<std::string, std::string> words = {
      {"zero", "0"},       {"two", "2"},        {"three", "3"},      {"four", "4"},
      {"five", "5"},       {"six", "6"},         {"seven", "7"},      {"eight", "8"},      {"nine", "9"},
      {"ten", "10"},       {"eleven", "11"},     {"twelve", "12"},    {"dozen", "12"},     {"thirteen", "13"},
      {"fourteen", "14"},  {"fifteen", "15"},    {"sixteen", "16"},   {"seventeen", "17"}, {"eighteen", "18"},
      {"nineteen", "19"},  {"twenty", "20"},     {"thirty", "30"},    {"forty", "40"},     {"fifty", "50"},
      {"sixty", "60"},     {"seventy", "70"},    {"eighty", "80"},    {"ninety", "90"},    {"hundred", "100"},
      {"thousand", "1000"}, {"million", "1000000"}, {"billion", "1000000000"}, {"trillion", "1000000000000"}};
  return words;
}

bool has_alnum(const std::string& w) {
  return std::any_of(w.begin(), w.end(), [](unsigned char c) { return std::isalnum(c) || c >= 0x80; });
}

bool is_number(const std::string& w) {
  return !w.empty() && std::all_of(w.begin(), w.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::string stem(std::string w) {
  if (w.size() > 3 && w.back() == 's' && w[w.size() - 2] != 's') w.pop_back();
  return w;
}

// The words of a text, punctuation dropped and negative contractions spelt out ("doesn't",
// "doesnt" -> "does" "not"; "cannot" -> "can" "not"), so that a contraction and its long form
// compare equal.
std::vector<std::string> spelt_out(std::string_view text) {
  std::vector<std::string> words;
  const auto& aux = negated_auxiliaries();
  for (auto& w : bert_basic_split(text)) {
    if (!has_alnum(w)) continue;
    if (w == "t" && !words.empty()) {  // the "t" of "n't": only after a known auxiliary
      if (auto it = aux.find(words.back()); it != aux.end()) {
        words.back() = it->second;
        words.push_back("not");
        continue;
      }
    }
    // Without the apostrophe: "dont", "isnt", "cant" (not "wont", which is a word).
    if (w.size() > 2 && w != "wont" && w.compare(w.size() - 2, 2, "nt") == 0)
      if (auto it = aux.find(w.substr(0, w.size() - 1)); it != aux.end()) {
        words.push_back(it->second);
        words.push_back("not");
        continue;
      }
    if (w == "cannot") {
      words.push_back("can");
      words.push_back("not");
      continue;
    }
    words.push_back(std::move(w));
  }
  return words;
}

// The proper names of a text, lowercased: words written with a capital letter (acronyms too)
// that do not start a sentence, and are not closed-class words ("I"). BERT's split lowercases,
// so this reads the original text; a name that starts with a non-ASCII letter is not seen.
std::vector<std::string> names_in(std::string_view text) {
  std::vector<std::string> names;
  bool sentence_start = true;
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80 && !std::isalnum(c)) {
      if (c == '.' || c == '?' || c == '!' || c == ':' || c == '\n') sentence_start = true;
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && (static_cast<unsigned char>(text[j]) >= 0x80 || std::isalnum(static_cast<unsigned char>(text[j]))))
      ++j;
    if (!sentence_start && std::isupper(c))
      for (auto& w : bert_basic_split(text.substr(i, j - i)))
        if (has_alnum(w) && !closed_class_words().count(w)) names.push_back(std::move(w));
    sentence_start = false;
    i = j;
  }
  return names;
}

struct words_of {
  std::vector<std::string> all, numbers, content;
  int negations = 0;
  explicit words_of(std::string_view text) {
    for (auto& w : spelt_out(text)) {
      if (auto n = number_words().find(w); n != number_words().end()) w = n->second;
      if (is_number(w)) numbers.push_back(w);
      if (negation_words().count(w)) ++negations;
      if (!closed_class_words().count(w)) content.push_back(stem(w));
      all.push_back(std::move(w));
    }
    std::sort(numbers.begin(), numbers.end());
    std::sort(content.begin(), content.end());
  }
};

// Elements of a (sorted) missing from b (sorted), as a multiset difference.
size_t count_missing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> d;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(d));
  return d.size();
}

// Whether some name of `a` is none of `b`'s words (in any case).
bool has_name_missing_from(std::string_view a, const words_of& b) {
  for (const auto& n : names_in(a))
    if (std::find(b.all.begin(), b.all.end(), n) == b.all.end()) return true;
  return false;
}

}  // namespace

guard_verdict may_share_answer(std::string_view a, std::string_view b) {
  const words_of wa(a), wb(b);
  if (wa.numbers != wb.numbers) return {false, "different numbers"};
  if (wa.negations != wb.negations) return {false, "a negation added or removed"};
  if (wa.all != wb.all) {
    auto sa = wa.all, sb = wb.all;
    std::sort(sa.begin(), sa.end());
    std::sort(sb.begin(), sb.end());
    if (sa == sb) return {false, "the same words in another order"};
  }
  const size_t only_a = count_missing(wa.content, wb.content), only_b = count_missing(wb.content, wa.content);
  if (only_a == 1 && only_b == 1 && wa.content.size() > 1) return {false, "one content word replaced"};
  if (has_name_missing_from(a, wb) && has_name_missing_from(b, wa)) return {false, "one name replaced by another"};
  return {};
}

}  // namespace troupe::cache
