#pragma once
// A pipeline over the fake backend, for the pipeline tests: start one, and the text a prompt
// generates alone (byte codec: one byte per token).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/runtime.hpp"
#include "tests/actors/fake_backend.hpp"

namespace troupe::test {

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

// What `prompt` generates alone in `n` tokens, as text.
inline std::string fake_text(const fake_options& o, const std::string& prompt, int32_t n) {
  std::string s;
  for (auto t : fake_reference(o, std::vector<int32_t>(prompt.begin(), prompt.end()), n)) s.push_back(static_cast<char>(t));
  return s;
}

}  // namespace troupe::test
