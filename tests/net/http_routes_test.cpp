// net/http_routes: the paths the server answers, their methods and metrics names.
#include "net/http_routes.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace troupe::net;

TEST(HttpRoutes, PathsTheirMethodsAndTheirMetricsNames) {
  EXPECT_EQ(strip_query("/v1/models?x=1&y"), "/v1/models");
  EXPECT_EQ(strip_query("/health"), "/health");
  EXPECT_STREQ(allowed_methods("/v1/chat/completions"), "POST");
  EXPECT_STREQ(allowed_methods("/admin/reload"), "POST");
  EXPECT_STREQ(allowed_methods("/v1/ws"), "GET");
  EXPECT_STREQ(allowed_methods("/v1/models/SmolLM2%2F135M"), "GET, HEAD");
  EXPECT_STREQ(allowed_methods("/v1/responses"), "POST");
  EXPECT_STREQ(allowed_methods("/v1/responses/resp_1"), "GET, HEAD, DELETE");
  EXPECT_STREQ(allowed_methods("/v1/responses/resp_1/input_items"), "GET, HEAD");
  EXPECT_STREQ(json_endpoint("/v1/responses"), "responses");
  EXPECT_EQ(json_endpoint("/v1/responses/resp_1"), nullptr);  // GET and DELETE take no body
  EXPECT_STREQ(endpoint_of("/v1/responses/resp_1"), "responses");
  EXPECT_EQ(allowed_methods("/v1/chat/completions/"), nullptr);  // no prefix matching but models'
  EXPECT_STREQ(json_endpoint("/tokenize"), "tokenize");
  EXPECT_EQ(json_endpoint("/v1/models"), nullptr);
  EXPECT_STREQ(endpoint_of("/v1/completions"), "completions");
  EXPECT_STREQ(endpoint_of("/v1/models/x"), "models");
  EXPECT_STREQ(endpoint_of("/index.html"), "page");
  EXPECT_STREQ(endpoint_of("/nope"), "other");
  // Every path with methods has a name of its own in the metrics.
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/tokenize", "/detokenize",
                        "/admin/reload", "/admin/config", "/v1/ws", "/health", "/metrics", "/", "/index.html",
                        "/v1/models", "/v1/models/m", "/v1/responses", "/v1/responses/r"}) {
    ASSERT_NE(allowed_methods(p), nullptr) << p;
    EXPECT_STRNE(endpoint_of(p), "other") << p;
  }
}

TEST(HttpRoutes, PercentEscapesAreDecodedAndMalformedOnesKept) {
  EXPECT_EQ(percent_decoded("SmolLM2%2F135M%20Q4"), "SmolLM2/135M Q4");
  EXPECT_EQ(percent_decoded("a%2fb"), "a/b");
  EXPECT_EQ(percent_decoded("100%"), "100%");
  EXPECT_EQ(percent_decoded("%zz%4"), "%zz%4");
}

TEST(HttpRoutes, QueryParametersAreSplitAndDecodedInOrder) {
  using params = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(query_params("order=asc&include%5B%5D=a%2Cb&flag&&limit=%31"),
            (params{{"order", "asc"}, {"include[]", "a,b"}, {"flag", ""}, {"limit", "1"}}));
  EXPECT_EQ(query_params(""), params{});
  EXPECT_EQ(query_params("&"), params{});
  EXPECT_EQ(query_params("a=1=2"), (params{{"a", "1=2"}}));
}
