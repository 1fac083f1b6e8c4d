#pragma once
// What the answer-assembly tests share (completion_assembly_test, responses_assembly_test): a test
// double of the pipeline interface, only what an assembly asks (token pieces for logprobs, the
// vocabulary's size for logit_bias, the model's name; nothing is submitted), and a parsed JSON
// document that keeps its own parser, so that several stay valid at once.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <simdjson.h>

#include "net/inference.hpp"
#include "tests/net/valid_json.hpp"

namespace troupe::net::test {

class fake_inference : public inference {
 public:
  bool ready() const override { return true; }
  std::string model_name() const override { return "fake-model"; }
  actors::request_handle submit(actors::request_spec, actors::event_handler, actors::ack_mode) override {
    return {};
  }
  std::string token_piece(int32_t id) const override {
    auto it = pieces.find(id);
    return it == pieces.end() ? std::string() : it->second;
  }
  int32_t vocab_size() const override { return 100; }

  std::map<int32_t, std::string> pieces{{1, "He"}, {2, "llo"}, {3, "\xC3\xA9"}, {4, " world"}, {5, "\xC3"},
                                        {6, "\xA9"}, {7, "!"}};
};

struct doc {
  explicit doc(std::string json) : text(std::move(json)) {
    EXPECT_TRUE(valid_json(text)) << text;
    root = parser.parse(text);
  }
  simdjson::dom::element operator[](const char* key) const { return root[key]; }
  simdjson::dom::parser parser;
  std::string text;
  simdjson::dom::element root;
};

}  // namespace troupe::net::test
