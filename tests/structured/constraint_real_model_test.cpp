// Constrained greedy decoding on the real SmolLM2-135M-Instruct: for every schema in
// tests/fixtures/schemas/ (and a json_object, a GBNF grammar, a regex and a choice), the masks
// are applied to the model's logits (disallowed tokens -inf, end-of-generation only where the
// matcher can end) and the output must be what the constraint asks: JSON that parses and holds
// the required keys. All sequences decode together in one batch, to stay well under a minute.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "model/backend.hpp"
#include "model/loaded_model.hpp"
#include "structured/constraint.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe;
using namespace troupe::structured;

namespace {

constexpr int32_t max_tokens = 200;
constexpr float repetition_penalty = 1.3f;

struct job {
  std::string name;
  constraint_spec spec;
  std::string prompt;
  std::vector<int32_t> prompt_tokens;
  std::unique_ptr<matcher> m;
  std::vector<int32_t> out;
  bool done = false;
  bool ended_by_eog = false;
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool allowed(const std::vector<uint64_t>& mask, int32_t t) { return (mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; }

}  // namespace

TEST(ConstraintRealModel, GreedyDecodingFollowsEveryConstraint) {
  if (!test::real_model_available()) GTEST_SKIP() << "real model not found at " << test::real_model_path();
  auto lm = model::loaded_model::load(test::real_model_path());
  ASSERT_TRUE(lm.ok()) << lm.error();
  const auto& tok = lm.value()->vocab;
  auto vocab = std::make_shared<const token_vocabulary>(tok);
  ASSERT_EQ(vocab->n_vocab(), 49152);

  std::vector<job> jobs;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(test::fixture("schemas")))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 30u);
  for (const auto& f : files) {
    job j;
    j.name = f.stem().string();
    j.spec = {kind::json_schema, read_file(f)};
    // As a user asks: the schema in the prompt (the model then knows what the fields mean).
    j.prompt = "Give one short example as JSON (brief values) for this JSON Schema:\n" + j.spec.source;
    jobs.push_back(std::move(j));
  }
  jobs.push_back({"json_object", {kind::json_object, ""}, "Describe a book as a JSON object.", {}, nullptr, {}, false, false});
  jobs.push_back({"grammar", {kind::grammar, "root ::= \"The answer is \" (\"yes\" | \"no\") \".\""}, "Is the sky blue?", {}, nullptr, {}, false, false});
  jobs.push_back({"regex", {kind::regex, "[A-Z][a-z]+ [0-9]{1,3} (apples|pears)"}, "How many apples are there?", {}, nullptr, {}, false, false});
  jobs.push_back({"choice", {kind::choice, R"(["positive", "negative", "neutral"])"}, "Sentiment of: I love this film!", {}, nullptr, {}, false, false});

  for (auto& j : jobs) {
    auto c = compile(j.spec, vocab);
    ASSERT_TRUE(c.ok()) << j.name << ": " << c.error();
    j.m = std::make_unique<matcher>(c.value());
    auto p = lm.value()->encode_chat({{"user", j.prompt}});
    ASSERT_TRUE(p.ok()) << p.error();
    j.prompt_tokens = p.value();
  }

  model::backend_options bo;
  bo.kv_bytes = 768ll << 20;
  auto be = model::make_backend("cpu", lm.value()->weights, bo);
  ASSERT_TRUE(be.ok()) << be.error();
  const int32_t bs = be.value()->block_size();
  int32_t longest = 0;
  for (const auto& j : jobs) longest = std::max<int32_t>(longest, static_cast<int32_t>(j.prompt_tokens.size()));
  const int32_t per_seq = (longest + max_tokens + bs) / bs;
  ASSERT_LE(per_seq * static_cast<int32_t>(jobs.size()), be.value()->n_blocks());

  const auto& eog = tok.eog_ids();
  const int32_t n_vocab = vocab->n_vocab();
  std::vector<uint64_t> mask, reference;
  std::vector<int32_t> n_past(jobs.size(), 0);
  std::vector<int32_t> next(jobs.size(), -1);
  for (int step = 0; step <= max_tokens; ++step) {
    model::batch b;
    std::vector<size_t> rows;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].done) continue;
      model::batch_sequence s;
      s.seq_id = i + 1;
      s.tokens = step == 0 ? jobs[i].prompt_tokens : std::vector<int32_t>{next[i]};
      s.n_past = n_past[i];
      if (step == 0) s.n_prompt = static_cast<int32_t>(jobs[i].prompt_tokens.size());
      for (int32_t k = 0; k < per_seq; ++k) s.block_table.push_back(static_cast<int32_t>(i) * per_seq + k);
      n_past[i] += static_cast<int32_t>(s.tokens.size());
      b.seqs.push_back(std::move(s));
      rows.push_back(i);
    }
    if (rows.empty()) break;
    auto logits = be.value()->forward(b);
    ASSERT_TRUE(logits.ok()) << logits.error();
    for (size_t r = 0; r < rows.size(); ++r) {
      job& j = jobs[rows[r]];
      const float* row = logits.value().row(r);
      if (static_cast<int32_t>(j.out.size()) >= max_tokens) {
        j.done = true;
        continue;
      }
      j.m->allowed_tokens(mask);
      if (step % 5 == 0) {  // the cached and cut walks against one plain walk of the vocabulary
        j.m->allowed_tokens_reference(reference);
        ASSERT_EQ(mask, reference) << j.name << ": the mask differs from the plain walk's after " << tok.decode(j.out);
      }
      // llama.cpp's repetition penalty over the last 64 tokens: greedy decoding of a 135M model
      // otherwise often repeats a word inside a string until max_tokens ("john.john.john...");
      // the argmax stays deterministic and only ever picks among the allowed tokens.
      std::vector<float> pen(row, row + n_vocab);
      std::vector<int32_t> recent(j.out.end() - std::min<std::ptrdiff_t>(64, static_cast<std::ptrdiff_t>(j.out.size())), j.out.end());
      std::sort(recent.begin(), recent.end());
      recent.erase(std::unique(recent.begin(), recent.end()), recent.end());
      for (int32_t t : recent) {
        float& v = pen[static_cast<size_t>(t)];
        v = v > 0 ? v / repetition_penalty : v * repetition_penalty;
      }
      row = pen.data();
      int32_t best = -1;
      float best_v = -std::numeric_limits<float>::infinity();
      for (int32_t t = 0; t < n_vocab; ++t)
        if (allowed(mask, t) && row[t] > best_v) best_v = row[t], best = t;
      if (j.m->can_end())
        for (int32_t t : eog)
          if (best < 0 || row[t] > best_v) best_v = row[t], best = t;
      ASSERT_GE(best, 0) << j.name << ": no token allowed after " << tok.decode(j.out);
      ASSERT_TRUE(j.m->accept(best)) << j.name << ": the mask allowed token " << best << " but accept refused it";
      if (tok.is_eog(best)) {
        j.done = j.ended_by_eog = true;
        continue;
      }
      j.out.push_back(best);
      next[rows[r]] = best;
      if (j.m->must_end()) j.done = true;
    }
  }

  simdjson::dom::parser parser;
  for (auto& j : jobs) {
    const std::string text = tok.decode(j.out);
    std::printf("  %-30s %3zu tokens: %.160s\n", j.name.c_str(), j.out.size(), text.c_str());
    SCOPED_TRACE(j.name + ": " + text);
    EXPECT_TRUE(j.m->can_end()) << "unfinished after " << j.out.size() << " tokens";
    if (j.name == "grammar") {
      EXPECT_TRUE(text == "The answer is yes." || text == "The answer is no.");
      continue;
    }
    if (j.name == "regex") {
      EXPECT_TRUE(std::regex_match(text, std::regex("[A-Z][a-z]+ [0-9]{1,3} (apples|pears)")));
      continue;
    }
    if (j.name == "choice") {
      EXPECT_TRUE(text == "positive" || text == "negative" || text == "neutral");
      continue;
    }
    simdjson::dom::element doc;
    const auto err = parser.parse(simdjson::padded_string(text)).get(doc);
    ASSERT_FALSE(err) << "not JSON: " << simdjson::error_message(err);
    if (j.name == "json_object") {
      EXPECT_TRUE(doc.is_object());
      continue;
    }
    // The schema's top-level required keys are all there.
    simdjson::dom::parser sp;
    simdjson::dom::element schema;
    ASSERT_FALSE(sp.parse(simdjson::padded_string(j.spec.source)).get(schema));
    simdjson::dom::array required;
    if (!schema["required"].get_array().get(required)) {
      ASSERT_TRUE(doc.is_object());
      for (auto r : required) {
        std::string_view key = r.get_string().value_unsafe();
        EXPECT_FALSE(doc[key].error()) << "required key '" << key << "' missing";
      }
    }
    std::string_view ty;
    if (!schema["type"].get_string().get(ty)) {
      if (ty == "object") {
        EXPECT_TRUE(doc.is_object());
      }
      if (ty == "array") {
        EXPECT_TRUE(doc.is_array());
      }
    }
  }
}
