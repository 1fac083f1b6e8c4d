// `troupe serve` in process on an ephemeral loopback port with SmolLM2-135M, driven by a Beast
// client: a non-streamed chat completion, an SSE stream ending with [DONE], WebSocket
// generate -> tokens -> done (with a bad frame in between that must not disturb it), resume
// after a disconnect, and bad JSON -> 400.
#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <simdjson.h>

#include <chrono>
#include <memory>
#include <string>

#include "net/serve.hpp"
#include "tests/support/test_paths.hpp"

using namespace troupe;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

class server_real_model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::real_model_available()) return;
    net::serve_options o;
    o.model = test::real_model_path();
    o.server.port = 0;
    o.server.io_threads = 1;
    o.backend_threads = 2;
    o.kv_mb = 64;
    o.quiet = true;
    auto s = net::serve_instance::start(o);
    ASSERT_TRUE(s.ok()) << s.error();
    inst = std::move(s.value()).release();
    ASSERT_TRUE(inst->wait_ready(std::chrono::seconds(60))) << inst->load_error();
  }
  static void TearDownTestSuite() {
    delete inst;
    inst = nullptr;
  }
  void SetUp() override {
    if (!inst) GTEST_SKIP() << "real model not found at " << test::real_model_path();
  }

  http::response<http::string_body> post(const std::string& target, const std::string& body) {
    asio::io_context ioc;
    beast::tcp_stream s(ioc);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), inst->port()));
    http::request<http::string_body> req(http::verb::post, target, 11);
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    p.body_limit(16 << 20);
    http::read(s, buf, p);
    return p.release();
  }

  std::unique_ptr<websocket::stream<tcp::socket>> ws(asio::io_context& ioc) {
    auto w = std::make_unique<websocket::stream<tcp::socket>>(ioc);
    w->next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), inst->port()));
    w->handshake("127.0.0.1", "/v1/ws");
    return w;
  }

  static std::string read_text(websocket::stream<tcp::socket>& w) {
    beast::flat_buffer b;
    w.read(b);
    return beast::buffers_to_string(b.data());
  }

  static net::serve_instance* inst;
  simdjson::dom::parser json;
};

net::serve_instance* server_real_model::inst = nullptr;

}  // namespace

TEST_F(server_real_model, chat_completion_non_streamed) {
  auto res = post("/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"Say hello."}],"max_tokens":8,"temperature":0})");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  auto doc = json.parse(res.body());
  EXPECT_EQ(std::string_view(doc["object"]), "chat.completion");
  EXPECT_FALSE(std::string_view(doc["choices"].at(0)["message"]["content"]).empty());
  EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 8);
  EXPECT_EQ(std::string_view(doc["choices"].at(0)["finish_reason"]), "length");
}

TEST_F(server_real_model, sse_stream_ends_with_done) {
  auto res = post("/v1/completions", R"({"prompt":"The capital of France is","max_tokens":6,"stream":true})");
  ASSERT_EQ(res.result_int(), 200) << res.body();
  EXPECT_EQ(res[http::field::content_type], "text/event-stream");
  const std::string& b = res.body();
  ASSERT_GE(b.size(), 14u);
  EXPECT_EQ(b.substr(b.size() - 14), "data: [DONE]\n\n");
  size_t chunks = 0, pos = 0;
  while ((pos = b.find("data: {", pos)) != std::string::npos) {
    ++chunks;
    ++pos;
  }
  EXPECT_GE(chunks, 2u);
  EXPECT_NE(b.find("\"finish_reason\":\"length\""), std::string::npos);
}

TEST_F(server_real_model, bad_json_is_400_in_openai_shape) {
  auto res = post("/v1/chat/completions", "{not json");
  EXPECT_EQ(res.result_int(), 400);
  auto doc = json.parse(res.body());
  EXPECT_EQ(std::string_view(doc["error"]["code"]), "invalid_json");
  auto wrong = post("/v1/chat/completions", R"({"messages":"hi"})");
  EXPECT_EQ(wrong.result_int(), 400);
  auto unknown = post("/v1/nothing", "{}");
  EXPECT_EQ(unknown.result_int(), 404);
}

TEST_F(server_real_model, websocket_generate_tokens_done_and_bad_frame) {
  asio::io_context ioc;
  auto w = ws(ioc);
  w->write(asio::buffer(std::string(R"({"type":"generate","id":"g1","prompt":"Once upon a time","max_tokens":8})")));
  w->write(asio::buffer(std::string("{oops")));
  int tokens = 0, next_index = 0;
  bool saw_error = false, done = false;
  while (!done) {
    const auto f = read_text(*w);
    auto doc = json.parse(f);
    const std::string_view type(doc["type"]);
    if (type == "token") {
      EXPECT_EQ(std::string_view(doc["id"]), "g1");
      EXPECT_EQ(int64_t(doc["index"]), next_index++);
      ++tokens;
    } else if (type == "error") {
      EXPECT_EQ(std::string_view(doc["code"]), "invalid_json");
      saw_error = true;
    } else if (type == "done") {
      EXPECT_EQ(std::string_view(doc["finish_reason"]), "length");
      EXPECT_EQ(int64_t(doc["usage"]["completion_tokens"]), 8);
      EXPECT_GT(double(doc["timings"]["ttft_ms"]), 0.0);
      done = true;
    }
  }
  EXPECT_EQ(tokens, 8);
  EXPECT_TRUE(saw_error);
  w->close(websocket::close_code::normal);
}

TEST_F(server_real_model, websocket_resume_after_disconnect) {
  asio::io_context ioc;
  int last_seen = -1;
  {
    auto w = ws(ioc);
    w->write(asio::buffer(std::string(R"({"type":"generate","id":"r1","prompt":"One, two, three,","max_tokens":24})")));
    for (int i = 0; i < 3; ++i) {
      auto doc = json.parse(read_text(*w));
      ASSERT_EQ(std::string_view(doc["type"]), "token");
      last_seen = static_cast<int>(int64_t(doc["index"]));
    }
    beast::error_code ec;
    w->next_layer().close(ec);  // vanish without a close frame
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto w = ws(ioc);
  w->write(asio::buffer("{\"type\":\"resume\",\"id\":\"r1\",\"from_index\":" + std::to_string(last_seen) + "}"));
  int expect = last_seen + 1;
  for (;;) {
    auto doc = json.parse(read_text(*w));
    const std::string_view type(doc["type"]);
    if (type == "done") break;
    ASSERT_EQ(type, "token");
    EXPECT_EQ(int64_t(doc["index"]), expect++);  // nothing lost, nothing duplicated
  }
  EXPECT_EQ(expect, 24);
}
