#pragma once
// Constrained decoding: what a request asks its output to be (a JSON object, a document a JSON
// Schema accepts, a GBNF grammar, a regular expression, one of a list of strings), compiled once
// against the model's vocabulary, and the per-sequence matcher that says which tokens may come
// next. Every kind is translated to one GBNF grammar (gbnf.hpp) and matched byte by byte; a token
// is allowed when all of its bytes keep the output a valid prefix of a sentence of the grammar.
//
// Layer: structured/ includes common/ and model/ only; the executor (actors/) applies the masks.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace troupe::model {
class tokenizer;
}

namespace troupe::structured {

// The kinds, as the request names them (OpenAI `response_format`, llama-server `grammar`,
// vLLM `structured_outputs` regex / choice).
namespace kind {
inline constexpr const char* json_object = "json_object";  // any JSON object; source ""
inline constexpr const char* json_schema = "json_schema";  // source: the schema's JSON text
inline constexpr const char* grammar = "grammar";          // source: GBNF text, root rule `root`
inline constexpr const char* regex = "regex";              // source: the pattern (whole output)
inline constexpr const char* choice = "choice";            // source: a JSON array of strings
}  // namespace kind

struct constraint_spec {
  std::string kind;    // one of `kind`; empty: unconstrained
  std::string source;
  bool empty() const { return kind.empty(); }
  bool operator==(const constraint_spec& o) const { return kind == o.kind && source == o.source; }
};

// The vocabulary as byte strings, built once per model and shared by every compiled constraint.
// Control tokens (<|im_end|>, <s>) have no text and are never allowed by a grammar; the caller
// allows end-of-generation tokens when the matcher can_end().
class token_vocabulary {
 public:
  explicit token_vocabulary(const model::tokenizer& tok);
  // Each token's bytes by id ("" for a token no grammar may produce): for fakes and tests.
  explicit token_vocabulary(std::vector<std::string> token_bytes);
  ~token_vocabulary();
  int32_t n_vocab() const;
  const std::string& bytes(int32_t token) const;  // "" for control / unused tokens
  struct impl;
  const impl& data() const { return *d_; }

 private:
  std::unique_ptr<impl> d_;
};

// A compiled constraint: immutable, shared by every sequence that uses it (and cached by spec).
class compiled_constraint;

// Errors name the problem: an unsupported JSON Schema keyword by name and path
// ("json_schema: unsupported keyword 'patternProperties' at /properties/tags"), a GBNF syntax
// error with line and column, an unknown kind, an invalid regex with its offset.
result<std::shared_ptr<const compiled_constraint>> compile(const constraint_spec& spec,
                                                           std::shared_ptr<const token_vocabulary> vocab);

// The GBNF grammar a spec is matched with (what compile() parses): for logs, tests and the
// composition of grammars. Errors as compile()'s.
result<std::string> to_gbnf(const constraint_spec& spec);

// How a compiled constraint's mask cache has been used (benchmarks, tests).
struct constraint_stats {
  int64_t mask_cache_hits = 0;
  int64_t mask_cache_misses = 0;
  int64_t mask_cache_entries = 0;
  // States missing from the mask cache whose cut to their stacks' top frames was found cached.
  int64_t cut_cache_hits = 0;
  int64_t cut_cache_misses = 0;
};
constraint_stats stats(const compiled_constraint& c);

// One sequence's position in a constraint. Not thread-safe; one per sequence.
class matcher {
 public:
  explicit matcher(std::shared_ptr<const compiled_constraint> c);
  matcher(const matcher&);
  matcher& operator=(const matcher&);
  matcher(matcher&&) noexcept;
  matcher& operator=(matcher&&) noexcept;
  ~matcher();

  // The tokens that may come next: bit t of `mask` (n_vocab bits, 64 per word, resized here) is
  // set when token t's bytes keep the output a valid prefix. End-of-generation tokens are not
  // set (see can_end).
  void allowed_tokens(std::vector<uint64_t>& mask);
  // The same mask by one plain walk of the vocabulary, no caches: for tests and benchmarks.
  void allowed_tokens_reference(std::vector<uint64_t>& mask) const;
  // Feeds a generated token; false (and the state unchanged) when it is not allowed. A control
  // token is accepted only as the end (can_end()).
  bool accept(int32_t token);
  // The output so far is a complete sentence: ending here is allowed.
  bool can_end() const;
  // Complete, and no byte may follow: only ending is allowed.
  bool must_end() const;
  // The fewest bytes that complete the output from here (0 when it may end now), and those bytes
  // (each step the lowest printable byte that keeps to the shortest way).
  int64_t min_bytes_to_end() const;
  std::string shortest_completion() const;
  // The tokens whose bytes begin shortest_completion(): what closes the output soonest, for when
  // the request's token budget is about to run out (mask_logits).
  void closing_tokens(std::vector<uint64_t>& mask);
  // The most bytes one byte can add to min_bytes_to_end() (entering the costliest rule, e.g. a
  // recursive object where null was the way out): how far from the budget's end a choice can
  // already make the output impossible to close in time.
  int64_t max_entry_bytes() const;
  // Clears from `mask` the tokens after which the output could no longer close within `budget`
  // bytes (judged by a lower bound: the fewest bytes to the end after the token's first byte,
  // less one for each further byte).
  void drop_tokens_past(std::vector<uint64_t>& mask, int64_t budget);
  int64_t n_accepted() const;  // tokens accepted so far

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace troupe::structured
