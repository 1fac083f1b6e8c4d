#pragma once
// A pipeline over the fake backend, for the pipeline tests: the small config they start from,
// starting one, a plain request, and the text a prompt generates alone (byte codec: one byte per
// token).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "tests/support/fake_backend.hpp"

namespace troupe::test {

// The small pipeline the tests start from: 8 sequences, 64 tokens a step, max_tokens up to 256,
// a 10 s step timeout. Each test file sets what it studies on top.
inline actors::pipeline_config small_pipeline_config() {
  actors::pipeline_config c;
  c.model_name = "fake";
  c.scheduler.max_batched_tokens = 64;
  c.scheduler.max_num_seqs = 8;
  c.admission.max_tokens_cap = 256;
  c.step_timeout_ms = 10000;
  return c;
}

inline actors::backend_maker fake_maker(fake_options o) {
  return [o]() -> result<std::unique_ptr<model::backend>> { return std::unique_ptr<model::backend>(new fake_backend(o)); };
}

// Starts a pipeline on `c` over a fake backend with options `o`; null (and a test failure) if it
// does not start.
inline std::unique_ptr<actors::pipeline> start_fake(actors::runtime& rt, const actors::pipeline_config& c,
                                                    const fake_options& o) {
  auto p = actors::pipeline::start(rt.system(), c, fake_maker(o), actors::make_byte_codec(o.n_vocab, o.eog));
  EXPECT_TRUE(p.ok()) << p.error();
  return p.ok() ? std::move(p.value()) : nullptr;
}

// A request for `prompt`, at most `max_tokens` tokens.
inline actors::request_spec prompt_spec(const std::string& prompt, int32_t max_tokens) {
  actors::request_spec s;
  s.prompt = prompt;
  s.max_tokens = max_tokens;
  return s;
}

// What `prompt` generates alone in `n` tokens, as text.
inline std::string fake_text(const fake_options& o, const std::string& prompt, int32_t n) {
  std::string s;
  for (auto t : fake_reference(o, std::vector<int32_t>(prompt.begin(), prompt.end()), n)) s.push_back(static_cast<char>(t));
  return s;
}

}  // namespace troupe::test
