#include "cache/semantic/question_guard.hpp"

#include <algorithm>
#include <cctype>
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

struct words_of {
  std::vector<std::string> all, numbers, content;
  explicit words_of(std::string_view text) {
    for (auto& w : bert_basic_split(text)) {
      if (!has_alnum(w)) continue;
      if (is_number(w)) numbers.push_back(w);
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

}  // namespace

guard_verdict may_share_answer(std::string_view a, std::string_view b) {
  const words_of wa(a), wb(b);
  if (wa.numbers != wb.numbers) return {false, "different numbers"};
  if (wa.all != wb.all) {
    auto sa = wa.all, sb = wb.all;
    std::sort(sa.begin(), sa.end());
    std::sort(sb.begin(), sb.end());
    if (sa == sb) return {false, "the same words in another order"};
  }
  const size_t only_a = count_missing(wa.content, wb.content), only_b = count_missing(wb.content, wa.content);
  if (only_a == 1 && only_b == 1 && wa.content.size() > 1) return {false, "one content word replaced"};
  return {};
}

}  // namespace troupe::cache
