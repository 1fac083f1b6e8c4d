// Fuzzes the HTTP request path in memory: the bytes a client sends on a connection, parsed by
// Beast's request parser with the limits the session sets (net/detail/request_reading.hpp: 16 KiB
// of headers, the 1 MiB default body), request after request as a keep-alive connection reads
// them, and each request routed and its body decoded by the same functions the session calls
// (the query stripped from the target, `Authorization: Bearer`, the WebSocket upgrade check, the
// OpenAI, embeddings and tokenize codecs).
//
// Why not the session itself: http_session takes a connected tcp::socket and a running pipeline,
// and a socket per input would make each run a few milliseconds and nondeterministic. The
// routing below mirrors http_session::handle's table; keep the two in step (a socketless
// router in net/ that both call would remove the copy).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "config/server_options.hpp"
#include "fuzz/fuzz_json.hpp"
#include "net/auth.hpp"
#include "net/openai_codec.hpp"
#include "net/tokenize_codec.hpp"

using namespace troupe;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

std::string strip_query(beast::string_view target) {
  const auto q = target.find('?');
  return std::string(q == beast::string_view::npos ? target : target.substr(0, q));
}

// What the session would do with one parsed request, short of the pipeline: the status it
// answers with when the request is refused before reaching the pipeline, 0 when it would go on.
int route(const http::request<http::string_body>& req) {
  const std::string path = strip_query(req.target());
  const auto method = req.method();
  const bool get = method == http::verb::get || method == http::verb::head;
  const auto h = req[http::field::authorization];
  const auto key = net::bearer_key(std::string_view(h.data(), h.size()));
  FUZZ_CHECK(key.size() <= h.size());
  if (path == "/v1/ws") {
    if (!get) return 405;
    return beast::websocket::is_upgrade(req) ? 0 : 400;
  }
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (method != http::verb::post) return 405;
    const auto r = net::parse_openai_request(req.body(), path == "/v1/chat/completions");
    return r.request ? 0 : r.error.status;
  }
  if (path == "/tokenize") {
    if (method != http::verb::post) return 405;
    const auto r = net::parse_tokenize_request(req.body());
    return r.query ? 0 : r.error.status;
  }
  if (path == "/detokenize") {
    if (method != http::verb::post) return 405;
    const auto r = net::parse_detokenize_request(req.body());
    return r.tokens ? 0 : r.error.status;
  }
  if (path == "/v1/embeddings") {
    if (method != http::verb::post) return 405;
    const auto r = net::parse_embedding_request(req.body());
    return r.query ? 0 : r.error.status;
  }
  if (path == "/health" || path == "/metrics" || path == "/v1/models" || path == "/" || path == "/index.html")
    return get ? 0 : 405;
  if (path == "/admin/reload") return method == http::verb::post ? 0 : 405;
  if (path == "/admin/config") return get ? 0 : 405;
  return 404;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const config::server_options opts;
  beast::flat_buffer buffer;
  {
    auto b = buffer.prepare(size);
    if (size) std::memcpy(b.data(), data, size);
    buffer.commit(size);
  }
  // Request after request, as the session's keep-alive loop reads them; at most as many as
  // there are bytes (each takes at least one), so a parser that consumed nothing cannot loop.
  for (size_t n = 0; n <= size; ++n) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(opts.max_body_bytes);
    parser.header_limit(16 * 1024);
    parser.eager(true);
    beast::error_code ec;
    while (!parser.is_done()) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec == http::error::need_more) {
        // The client half-closed: what is left must complete the message or it is an error.
        // Nothing of a message yet is the end of the stream, as Beast's read says
        // (error::end_of_stream); put_eof asserts it is never called then.
        if (!parser.got_some()) return 0;
        ec = {};
        parser.put_eof(ec);
        if (!ec && !parser.is_done()) return 0;
      }
      if (ec) break;
      if (used == 0 && !parser.is_done()) {
        if (!parser.got_some()) return 0;
        parser.put_eof(ec);
        if (ec || !parser.is_done()) return 0;
      }
    }
    if (ec) return 0;  // the session answers 400/413/431 or closes; nothing more to read
    auto req = parser.release();
    FUZZ_CHECK(req.body().size() <= opts.max_body_bytes);
    const int status = route(req);
    FUZZ_CHECK(status == 0 || (status >= 400 && status < 600));
    if (!req.keep_alive() || buffer.size() == 0) return 0;
  }
  return 0;
}
