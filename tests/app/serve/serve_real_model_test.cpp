// `troupe serve` in process on an ephemeral loopback port with SmolLM2-135M, driven by a Beast
// client: a non-streamed chat completion, an SSE stream ending with [DONE], WebSocket
// generate -> tokens -> done (with a bad frame in between that must not disturb it), resume
// after a disconnect, bad JSON -> 400, and the semantic cache (MiniLM) answering a repeat and a
// paraphrase with `cached` and `similarity`, reported in /health.
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
#include <thread>
#include <tuple>
#include <utility>

#include "app/serve/serve.hpp"
#include "tests/support/embedder_paths.hpp"
#include "tests/support/temp_dir.hpp"
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
    app::serve_options o;
    auto& c = o.config;
    c.model.path = test::real_model_path();
    c.server.port = 0;
    c.server.io_threads = 1;
    c.backend.n_threads = 2;
    c.backend.kv_bytes = int64_t{64} << 20;
    o.quiet = true;
    cache_dir = new test::temp_dir("server-cache");
    c.pipeline.cache.semantic.path = cache_dir->str("db");
    c.pipeline.cache.semantic.embedder_opts.model_dir = test::embedder_dir();
    c.pipeline.cache.semantic.async_insert = false;
    auto s = app::serve_instance::start(o);
    ASSERT_TRUE(s.ok()) << s.error();
    inst = std::move(s.value()).release();
    ASSERT_TRUE(inst->wait_ready(std::chrono::seconds(60))) << inst->load_error();
  }
  static void TearDownTestSuite() {
    delete inst;
    inst = nullptr;
    delete cache_dir;
    cache_dir = nullptr;
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

  http::response<http::string_body> get(const std::string& target) {
    asio::io_context ioc;
    beast::tcp_stream s(ioc);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), inst->port()));
    http::request<http::empty_body> req(http::verb::get, target, 11);
    req.set(http::field::host, "127.0.0.1");
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    return res;
  }

  // One WebSocket generate of `question` as a chat message; the text and the done frame.
  std::pair<std::string, std::string> ask(const std::string& id, const std::string& question) {
    asio::io_context ioc;
    auto w = ws(ioc);
    w->write(asio::buffer(R"({"type":"generate","id":")" + id + R"(","messages":[{"role":"user","content":")" + question +
                          R"("}],"max_tokens":12})"));
    std::string text;
    for (;;) {
      const auto f = read_text(*w);
      auto doc = json.parse(f);
      const std::string_view type(doc["type"]);
      if (type == "token") text += std::string(std::string_view(doc["text"]));
      if (type == "done" || type == "error") {
        w->close(websocket::close_code::normal);
        return {text, f};
      }
    }
  }

  static app::serve_instance* inst;
  static test::temp_dir* cache_dir;
  simdjson::dom::parser json;
};

app::serve_instance* server_real_model::inst = nullptr;
test::temp_dir* server_real_model::cache_dir = nullptr;

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
    w->write(asio::buffer(std::string(
        R"({"type":"generate","id":"r1","prompt":"One, two, three,","max_tokens":24,"resume_key":"0123456789abcdef0123"})")));
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
  w->write(asio::buffer("{\"type\":\"resume\",\"id\":\"r1\",\"resume_key\":\"0123456789abcdef0123\",\"from_index\":" +
                        std::to_string(last_seen) + "}"));
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

TEST_F(server_real_model, semantic_cache_serves_a_repeat_and_a_paraphrase) {
  if (!test::embedder_available()) GTEST_SKIP() << "no MiniLM files in " << test::embedder_dir();
  auto [text1, done1] = ask("c1", "What is the capital city of Italy?");
  auto d1 = json.parse(done1);
  ASSERT_EQ(std::string_view(d1["type"]), "done") << done1;
  EXPECT_FALSE(bool(d1["cached"]));
  ASSERT_FALSE(text1.empty());

  // The stream's close reaches the cache just after the done frame: give it a moment.
  std::string text2, done2;
  for (int i = 0; i < 50; ++i) {
    std::tie(text2, done2) = ask("c2", "What is the capital city of Italy?");
    if (json.parse(done2)["cached"].get_bool().value_unsafe()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto d2 = json.parse(done2);
  EXPECT_TRUE(bool(d2["cached"])) << done2;
  EXPECT_DOUBLE_EQ(double(d2["similarity"]), 1.0);
  EXPECT_EQ(text2, text1);

  // A paraphrase MiniLM puts above the 0.90 threshold, which the lexical guards let through.
  auto [text3, done3] = ask("c3", "what is the capital city of italy");
  auto d3 = json.parse(done3);
  EXPECT_TRUE(bool(d3["cached"])) << done3;
  EXPECT_GE(double(d3["similarity"]), 0.90);
  EXPECT_LT(double(d3["similarity"]), 1.0);
  EXPECT_EQ(text3, text1);

  // A different question is not served someone else's answer.
  auto [text4, done4] = ask("c4", "What is the capital city of Spain?");
  EXPECT_FALSE(bool(json.parse(done4)["cached"])) << done4;

  // /health says the cache is on (the poller refreshes it every 2 s).
  std::string health;
  for (int i = 0; i < 50; ++i) {
    health = get("/health").body();
    if (health.find("\"hits\":2") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  auto h = json.parse(health);
  EXPECT_EQ(std::string_view(h["status"]), "ok") << health;
  EXPECT_TRUE(bool(h["cache"]["enabled"])) << health;
  EXPECT_EQ(std::string_view(h["cache"]["policy"]), "semantic") << health;
  EXPECT_GE(int64_t(h["cache"]["hits"]), 2) << health;
}
