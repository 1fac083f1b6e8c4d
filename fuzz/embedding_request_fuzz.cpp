// Fuzzes the /v1/embeddings decoder (net/openai_codec.cpp parse_embedding_request). Invariants:
// no crash; a refusal is a 4xx with a message and its error body is valid JSON; an accepted body
// has 1..max_embedding_inputs inputs and no negative `dimensions`; the response writer
// (embeddings_json) gives valid JSON for as many vectors, in floats and in base64.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_json.hpp"
#include "net/openai_codec.hpp"

using namespace troupe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  simdjson::dom::parser p;
  const auto r = net::parse_embedding_request(body);
  if (!r.query) {
    FUZZ_CHECK(r.error.status >= 400 && r.error.status < 500);
    FUZZ_CHECK(!r.error.message.empty());
    fuzz::must_be_object(p, net::error_json(r.error));
    return 0;
  }
  const auto& q = *r.query;
  FUZZ_CHECK(!q.inputs.empty() && q.inputs.size() <= net::max_embedding_inputs);
  FUZZ_CHECK(q.dimensions >= 0);
  net::embedding_result res;
  res.model = q.model;  // echoed back: whatever bytes the client sent must come out as valid JSON
  for (size_t i = 0; i < q.inputs.size() && i < 4; ++i) res.vectors.push_back({0.5f, -1.0f, float(i)});
  simdjson::dom::array arr;
  FUZZ_CHECK(!fuzz::must_be_object(p, net::embeddings_json(res, q.base64))["data"].get(arr));
  FUZZ_CHECK(arr.size() == res.vectors.size());
  return 0;
}
