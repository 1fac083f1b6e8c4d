#pragma once
// Lexical vetoes on a semantic match. A sentence embedding scores questions that differ in one
// decisive word almost like paraphrases: on tests/fixtures/paraphrases, MiniLM gives "Book a
// flight from Paris to London" / "... from London to Paris" 0.996 and "convert 5 km to miles" /
// "convert 5 miles to km" 0.984, above most true paraphrases. No threshold separates those, so
// before a cached answer is served for a question that is not exactly the cached one, these
// checks on the two questions' words may refuse it:
//   - different numbers (as a multiset; number words count as their digits, "two" as "2"):
//     "square root of 144" vs "of 169", "name a fruit" vs "name three fruits";
//   - a negation added or removed (not, no, never, none, nothing, nobody, nowhere, neither, nor,
//     without; "isn't", "isnt" and "cannot" count as "not"): "is it safe to mix bleach and
//     vinegar" vs "is it not safe ...", "planets with rings" vs "with no rings". A negation is
//     one short word, so the embedding barely moves, and the answer becomes its opposite;
//   - the same words in another order: swapped operands, "from Paris to London" vs reversed
//     (also "why doesn't it work" vs "why does it not work");
//   - exactly one content word replaced by another, the rest of the content words equal:
//     "capital of France" vs "capital of Germany". This also refuses some true paraphrases that
//     swap one synonym ("largest planet" vs "biggest planet"); a miss costs one model run, a
//     false hit serves a wrong answer;
//   - one name replaced by another (capitalized words past a sentence's first, each side having
//     one the other lacks): "Pride and Prejudice" vs "War and Peace", "Japan" vs "South Korea".
//     A name only added ("... on Earth") passes.
// On tests/fixtures/paraphrases these refuse 10 of the 66 paraphrases and let 10 of the 64
// near misses through (9 and 15 before the negation, number-word and name checks).
// Words come from BERT's basic tokenization (lowercased, accents stripped, punctuation apart);
// content words are those outside a short list of closed-class words (articles, auxiliaries,
// pronouns, wh-words, "of", "in", "to", ...), with a plural "s" dropped. Negations, "for",
// "with", "from", ordinals and quantifiers count as content.
#include <string>
#include <string_view>

namespace troupe::cache {

struct guard_verdict {
  bool ok = true;
  std::string reason;  // why not, when !ok
};

guard_verdict may_share_answer(std::string_view a, std::string_view b);

}  // namespace troupe::cache
