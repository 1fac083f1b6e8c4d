// The Responses API's part of the HTTP session (net/http_session.hpp): POST /v1/responses runs
// as a completion does (http_session_completion.cpp), its answer shaped by
// net/responses_assembly.hpp; GET and DELETE /v1/responses/{id} (and GET .../input_items) read
// and remove what the bounded store (net/responses_store.hpp) kept. Stored responses are per API key: a key sees
// only its own.
#include <cstring>
#include <ctime>
#include <optional>
#include <string_view>

#include "net/http_routes.hpp"
#include "net/http_session.hpp"
#include "net/json_writer.hpp"
#include "net/responses_codec.hpp"

namespace troupe::net::detail {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

// Routes of the API that are not served (token counting, compaction, cancelling a background
// response): named in a 404, rather than a 405 that would suggest another method on them.
const char* unserved_route(std::string_view rest) {
  if (rest == "input_tokens") return "counting input tokens (POST /v1/responses/input_tokens)";
  if (rest == "compact") return "compaction (POST /v1/responses/compact)";
  if (rest.size() > 7 && rest.substr(rest.size() - 7) == "/cancel")
    return "cancelling (POST /v1/responses/{id}/cancel: responses run in their request, never in the background)";
  return nullptr;
}

// GET /v1/responses/{id}'s query: the stored response is returned whole, as answered, so
// `stream=true` (a replay of its events) and `include` are not served; the 400 names them.
std::optional<api_error> retrieve_query_error(std::string_view query) {
  for (const auto& [k, v] : query_params(query)) {
    if (k == "stream" && v == "false") continue;
    return bad_request("query parameter '" + k +
                           "' is not served on GET /v1/responses/{id}: the stored response is returned whole, as "
                           "it was answered",
                       k, "unsupported_field");
  }
  return std::nullopt;
}

}  // namespace

std::string http_session::stored_key(const std::string& id) const { return owner_ + '\n' + id; }

void http_session::handle_responses(const request& req, const std::string& path) {
  endpoint_ = "responses";
  if (path.size() > std::strlen("/v1/responses/"))
    if (const char* what = unserved_route(std::string_view(path).substr(std::strlen("/v1/responses/"))))
      return send_error(bad_status(404, std::string("the Responses API's ") + what + " is not served here", "not_found"));
  const auto method = req.method();
  const bool post = path == "/v1/responses";
  const bool get = method == http::verb::get || method == http::verb::head;
  if (post ? method != http::verb::post : !get && method != http::verb::delete_) return method_not_allowed(path);
  const auto who = authorise(req);
  if (!who) return send_error(unauthorised());
  owner_ = who->second;
  if (post) {
    auto parsed = parse_responses_request(req.body(), [this](const std::string& id) -> std::optional<std::string> {
      auto e = ctx_.responses.get(stored_key(id));
      if (!e) return std::nullopt;
      return std::move(e->conversation);
    });
    if (!parsed.request) return send_error(parsed.error);
    if (!ctx_.inf.ready()) {
      api_error e = from_pipeline_error({0, "loading", "the model is still loading; retry shortly", 0});
      retry_after_s_ = 5;
      return send_error(e);
    }
    return start_response(std::move(*parsed.request), who->first);
  }
  // /v1/responses/{id} and /v1/responses/{id}/input_items: the openai client percent-encodes the id.
  std::string_view rest = std::string_view(path).substr(std::strlen("/v1/responses/"));
  constexpr std::string_view items_suffix = "/input_items";
  const bool items = rest.size() > items_suffix.size() && rest.substr(rest.size() - items_suffix.size()) == items_suffix;
  if (items) rest.remove_suffix(items_suffix.size());
  const std::string id = percent_decoded(rest);
  if (items && !get) return method_not_allowed(path);
  if (get) {
    auto e = ctx_.responses.get(stored_key(id));
    if (!e) return send_error(unknown_response(id));
    const std::string_view target(req.target().data(), req.target().size());
    const size_t q = target.find('?');
    if (!items) {
      if (auto bad = retrieve_query_error(q == std::string_view::npos ? std::string_view() : target.substr(q + 1)))
        return send_error(*bad);
      return send(http::status::ok, std::move(e->response_json), "application/json");
    }
    auto list = input_items_json(id, e->input_items, q == std::string_view::npos ? std::string_view() : target.substr(q + 1));
    if (!list.json) return send_error(list.error);
    return send(http::status::ok, std::move(*list.json), "application/json");
  }
  if (!ctx_.responses.erase(stored_key(id))) return send_error(unknown_response(id));
  json_writer w;
  w.begin_object().field("id", id).field("object", "response").field("deleted", true).end_object();
  send(http::status::ok, w.take(), "application/json");
}

void http_session::start_response(responses_request req, const std::string& tenant) {
  if (auto e = responses_.begin(req, static_cast<int64_t>(std::time(nullptr)), ctx_.inf)) return send_error(*e);
  answer_ = &responses_;
  run_answer(std::move(req.chat.spec), tenant);
}

// A response answered with `store` (the API's default) is kept for previous_response_id and
// GET /v1/responses/{id}, before its answer is written: a client that continues at once finds it.
void http_session::keep_response() {
  if (answer_ != &responses_ || !responses_.answered() || !responses_.store()) return;
  ctx_.responses.put(stored_key(responses_.id()),
                     {responses_.response_json(), responses_.stored_conversation(), responses_.input_items()});
}

}  // namespace troupe::net::detail
