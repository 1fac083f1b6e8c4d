#include "net/openai_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "net/detail/prompt_cache_fields.hpp"
#include "net/detail/prompt_reader.hpp"
#include "net/detail/request_reader.hpp"
#include "net/json_writer.hpp"

namespace troupe::net {

namespace dom = simdjson::dom;
using detail::reader;

api_error from_pipeline_error(const actors::error_event& ev, std::string_view input_field,
                              std::string_view max_tokens_field, std::string_view constraint_field) {
  namespace errc = actors::errc;
  api_error e;
  e.code = ev.code;
  e.message = ev.message;
  const std::string& c = ev.code;
  if (c == errc::invalid_request || c == errc::context_length || c == errc::kv_capacity) {
    e.status = 400;
    if (c == errc::context_length) {
      // As OpenAI names it, and with its code: clients (LangChain, LiteLLM) match on it to trim
      // the history and try again.
      e.param = std::string(input_field);
      e.code = "context_length_exceeded";
      // The message names the length cap as the client spelt it (max_completion_tokens).
      if (max_tokens_field != "max_tokens")
        for (auto at = e.message.find("max_tokens"); at != std::string::npos;
             at = e.message.find("max_tokens", at + max_tokens_field.size()))
          e.message.replace(at, std::strlen("max_tokens"), max_tokens_field);
    }
    if (c == errc::invalid_request) {
      std::string_view lead = std::string_view(e.message).substr(0, e.message.find(' '));
      if (!lead.empty() && lead.back() == ':') lead.remove_suffix(1);  // "speculative: no method 'x' ..."
      if (lead.size() >= 2 && lead.front() == '\'' && lead.back() == '\'')  // "'ignore_eos' cannot be ..."
        lead = lead.substr(1, lead.size() - 2);
      for (std::string_view f : {TROUPE_COMMON_FIELDS, "logprobs", "tools", "tool_choice"})
        if (lead == f) e.param = std::string(f);
      for (std::string_view kind : {"json_schema", "regex", "grammar", "choice"})
        if (lead == kind && !constraint_field.empty()) e.param = std::string(constraint_field);
      if (e.param == "max_tokens" && max_tokens_field != "max_tokens") {
        e.message.replace(e.message.find("max_tokens"), std::strlen("max_tokens"), max_tokens_field);
        e.param = std::string(max_tokens_field);
      }
    }
  } else if (c == errc::unknown_model) {
    e.status = 404;
    e.param = "model";
  } else if (c == errc::overloaded || c == errc::rate_limited) {
    e.status = 429;
    e.type = c == errc::overloaded ? "server_overloaded" : "rate_limit_exceeded";
  } else if (c == errc::deadline || c == errc::timeout) {
    e.status = 504;
    e.type = "timeout";
    // The request's own deadline_ms: a retry would wait past the deadline the client set.
    e.no_retry = c == errc::deadline;
  } else if (c == "loading" || c == errc::no_replica) {
    e.status = 503;
    e.type = "service_unavailable";
  } else {
    e.status = 500;
    e.type = "server_error";
  }
  return e;
}

int64_t utf8_chars(std::string_view text) {
  return static_cast<int64_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

std::string error_json(const api_error& e) {
  json_writer w;
  w.begin_object().key("error").begin_object();
  w.field("message", e.message).field("type", e.type);
  w.key("code");
  if (e.code.empty()) w.null(); else w.value(e.code);
  w.key("param");
  if (e.param.empty()) w.null(); else w.value(e.param);
  w.end_object().end_object();
  return w.take();
}

parsed_openai parse_openai_request(std::string_view body, bool chat) {
  parsed_openai out;
  dom::object obj;
  if (!detail::parse_object(body, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  // Every field either endpoint takes; docs/protocol.md lists each as honoured, refused by name
  // (detail::refuse below) or ignored on purpose.
  if (chat) {
    detail::known_fields(r, {TROUPE_COMMON_FIELDS, "messages", "stream", "stream_options", "n", "logprobs",
                             "top_logprobs", "tools", "tool_choice", "parallel_tool_calls", "user", "metadata",
                             "store", "service_tier", "modalities", "prompt_cache_key", "safety_identifier",
                             TROUPE_PROMPT_CACHE_FIELDS,
                             // refused by name below
                             "prompt", "audio", "functions", "function_call", "prediction", "reasoning_effort",
                             "web_search_options", "verbosity"});
    detail::refuse(r, "prompt", "the chat endpoint takes 'messages' ('prompt' is for /v1/completions)");
    detail::refuse(r, "audio", "this server answers in text only");
    detail::refuse(r, "functions", "the deprecated function-calling fields are not served: use 'tools'");
    detail::refuse(r, "function_call", "the deprecated function-calling fields are not served: use 'tool_choice'");
    detail::refuse(r, "prediction", "predicted outputs are not served");
    detail::refuse(r, "reasoning_effort", "the model is not a reasoning model");
    detail::refuse(r, "web_search_options", "there is no web search here");
    detail::refuse(r, "verbosity", "the model has no verbosity setting");
    detail::prompt_cache_fields(r);
  } else {
    detail::known_fields(r, {TROUPE_COMMON_FIELDS, "prompt", "stream", "stream_options", "n", "logprobs", "echo",
                             "suffix", "best_of", "user",
                             // refused by name below
                             "messages", "top_logprobs"});
    detail::refuse(r, "messages", "the completions endpoint takes 'prompt' ('messages' is for /v1/chat/completions)");
    detail::refuse(r, "top_logprobs", "the completions endpoint takes the number of alternatives in 'logprobs'");
    // Fill-in-the-middle needs the model's FIM tokens; the default model (SmolLM2) has none, so
    // the FIM prompt is not implemented (docs/protocol.md).
    detail::refuse(r, "suffix", "fill-in-the-middle is not served (the default model, SmolLM2, has no FIM tokens)");
  }
  openai_request req;
  detail::read_common(r, req.spec, 2.0f);  // OpenAI's range: 0..2
  if (r.get("max_completion_tokens")) req.max_tokens_field = "max_completion_tokens";
  // The legacy endpoint's own default, as OpenAI documents it (and vLLM keeps): a client written
  // against it and leaving max_tokens out expects 16 tokens, not admission.default_max_tokens.
  if (!chat && !r.err && !r.get("max_tokens") && !r.get("max_completion_tokens"))
    req.spec.max_tokens = legacy_completion_default_max_tokens;
  req.constraint_field = detail::constraint_field(r);
  req.model = req.spec.model;
  r.boolean("stream", req.stream);
  if (auto so = r.get("stream_options")) {
    if (!so->is_object()) r.wrong("stream_options", "an object", *so);
    else {
      reader sr{dom::object(*so), std::nullopt, "stream_options."};
      detail::known_fields(sr, {"include_usage", "include_obfuscation"});
      sr.boolean("include_usage", req.include_usage);
      // OpenAI pads streamed deltas with random characters against size side channels when this
      // is true (its default); Troupe does not pad: false is what it does, true is refused.
      bool obfuscate = false;
      sr.boolean("include_obfuscation", obfuscate);
      if (!sr.err && obfuscate)
        sr.err = bad_request("'stream_options.include_obfuscation' true is not served: chunks are not padded (send false)",
                             "stream_options.include_obfuscation");
      if (sr.err && !r.err) r.err = sr.err;
    }
    if (!r.err && !req.stream)
      r.err = bad_request("'stream_options' goes with 'stream': true", "stream_options");
  }
  int64_t n = 1;
  r.integer("n", n);
  if (!r.err && (n < 1 || n > max_choices))
    r.err = bad_request("'n' must be in [1, " + std::to_string(max_choices) + "]", "n");
  req.n = static_cast<int32_t>(n);
  // Things that change nothing the server does, accepted and ignored on purpose (type-checked):
  // `user` / `safety_identifier` (no per-end-user state), `metadata` and `prompt_cache_key`
  // (the prefix cache needs no hint).
  std::string ignored;
  r.str("user", ignored);
  if (chat) {
    r.str("safety_identifier", ignored);
    r.str("prompt_cache_key", ignored);
    // metadata: held to OpenAI's limits (at most 16 pairs, keys up to 64 characters, string
    // values up to 512), so that a request OpenAI refuses is refused here too.
    if (auto m = r.get("metadata"); m && !r.err) {
      if (!m->is_object()) {
        r.wrong("metadata", "an object", *m);
      } else {
        size_t pairs = 0;
        for (auto kv : dom::object(*m)) {
          ++pairs;
          const std::string key(kv.key);
          if (const int64_t chars = utf8_chars(key); chars > 64) {  // characters, as OpenAI counts them
            r.err = bad_request("'metadata' keys must be at most 64 characters (one has " + std::to_string(chars) + ")",
                                "metadata." + key);
          } else if (!kv.value.is_string()) {
            reader sub{dom::object(*m), {}, "metadata."};
            sub.wrong(key, "a string", kv.value);
            r.err = sub.err;
          } else if (utf8_chars(std::string_view(kv.value)) > 512) {
            r.err = bad_request("'metadata." + key + "' must be at most 512 characters", "metadata." + key);
          }
          if (r.err) break;
        }
        if (!r.err && pairs > 16)
          r.err = bad_request("'metadata' holds at most 16 pairs, not " + std::to_string(pairs), "metadata");
      }
    }
    // Values that ask for what the server does anyway; the others are refused by name.
    if (auto st = r.get("store"); st && !r.err) {
      if (!st->is_bool()) r.wrong("store", "a boolean", *st);
      else if (bool(*st)) r.err = bad_request("'store' is not supported by this server: answers are not stored", "store");
    }
    std::string tier;
    r.str("service_tier", tier);
    if (!r.err && r.get("service_tier") && tier != "auto" && tier != "default")
      r.err = bad_request("'service_tier' must be \"auto\" or \"default\" (there is one tier)", "service_tier");
    if (auto md = r.get("modalities"); md && !r.err) {
      const bool text_only = md->is_array() && dom::array(*md).size() == 1 && dom::array(*md).at(0).is_string() &&
                             std::string_view(dom::array(*md).at(0)) == "text";
      if (!text_only) r.err = bad_request("'modalities' must be [\"text\"] (this server answers in text only)", "modalities");
    }
    // logprobs: a boolean; top_logprobs 0..20 with it.
    r.boolean("logprobs", req.logprobs);
    int64_t top = 0;
    r.integer("top_logprobs", top);
    if (!r.err && (top < 0 || top > 20)) r.err = bad_request("'top_logprobs' must be in [0, 20]", "top_logprobs");
    if (!r.err && top > 0 && !req.logprobs)
      r.err = bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    req.spec.sampling.n_logprobs = static_cast<int32_t>(top);
    detail::read_tools(r, req.spec);
    detail::read_messages(r, req.spec);
    if (!r.err && req.spec.messages.empty()) r.err = bad_request("'messages' is required", "messages");
  } else {
    // logprobs: the number of alternatives, 0..5, as the legacy API (0: the tokens' own only).
    if (auto lp = r.get("logprobs"); lp && !r.err) {
      if (lp->is_bool() && !bool(*lp)) {
        // false: not asked (some clients send it)
      } else if (!lp->is_int64()) {
        r.wrong("logprobs", "an integer (the number of alternatives, 0 to 5)", *lp);
      } else if (int64_t(*lp) < 0 || int64_t(*lp) > max_completion_logprobs) {
        r.err = bad_request("'logprobs' must be in [0, " + std::to_string(max_completion_logprobs) + "]", "logprobs");
      } else {
        req.logprobs = true;
        req.spec.sampling.n_logprobs = static_cast<int32_t>(int64_t(*lp));
      }
    }
    r.boolean("echo", req.echo);
    if (!r.err && req.echo && req.logprobs)
      r.err = bad_request("'echo' with 'logprobs' is not supported: the prompt's logprobs are not computed", "echo");
    int64_t best_of = 1;
    r.integer("best_of", best_of);
    if (!r.err && best_of != 1)
      r.err = bad_request("'best_of' other than 1 is not supported by this server (use 'n')", "best_of");
    bool seen = false;
    detail::read_prompts(r, req.spec, req.batch, seen);
    if (!r.err && !seen) r.err = bad_request("'prompt' is required", "prompt");
    if (!r.err && static_cast<int64_t>(req.batch.size()) * req.n > max_batch_choices)
      r.err = bad_request("'prompt' holds " + std::to_string(req.batch.size()) + " prompts of " + std::to_string(req.n) +
                              " choices each: at most " + std::to_string(max_batch_choices) + " choices in one request",
                          "prompt");
  }
  req.spec.logprobs = req.logprobs;
  detail::bypass_cache_for(r, req.spec, req.logprobs, "logprobs");
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  out.request = std::move(req);
  return out;
}

namespace {

void write_usage(json_writer& w, const actors::usage_info& u) {
  w.key("usage").begin_object();
  w.field("prompt_tokens", u.prompt_tokens).field("completion_tokens", u.completion_tokens);
  w.field("total_tokens", u.prompt_tokens + u.completion_tokens);
  w.key("prompt_tokens_details").begin_object().field("cached_tokens", u.cached_prompt_tokens).end_object();
  // Only where something was proposed: the usage of a request that did not speculate is OpenAI's.
  if (u.speculative_proposed > 0)
    w.key("speculative")
        .begin_object()
        .field("proposed", u.speculative_proposed)
        .field("accepted", u.speculative_accepted)
        .end_object();
  w.end_object();
}

void write_head(json_writer& w, const completion_result& r, const char* object) {
  w.field("id", r.id).field("object", object).field("created", r.created).field("model", r.model);
}

// A logprob as OpenAI writes it: finite (-9999 stands for "impossible", as OpenAI uses).
void write_lp(json_writer& w, float lp) { w.value_float32(std::isfinite(lp) ? lp : -9999.0f); }

void write_bytes(json_writer& w, const std::string& piece) {
  w.begin_array();
  for (unsigned char c : piece) w.value(static_cast<int64_t>(c));
  w.end_array();
}

}  // namespace

void write_token_logprobs(json_writer& w, const std::vector<token_logprob_entry>& entries) {
  w.begin_array();
  for (const auto& e : entries) {
    w.begin_object().field("token", e.piece).key("logprob");
    write_lp(w, e.logprob);
    w.key("bytes");
    write_bytes(w, e.piece);
    w.key("top_logprobs").begin_array();
    for (const auto& [piece, lp] : e.top) {
      w.begin_object().field("token", piece).key("logprob");
      write_lp(w, lp);
      w.key("bytes");
      write_bytes(w, piece);
      w.end_object();
    }
    w.end_array().end_object();
  }
  w.end_array();
}

namespace {

// chat: {"content":[token logprobs],"refusal":null}.
void write_chat_logprobs(json_writer& w, const std::vector<token_logprob_entry>& entries) {
  w.key("logprobs").begin_object().key("content");
  write_token_logprobs(w, entries);
  w.key("refusal").null().end_object();
}

// completions: {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{piece: lp}],"text_offset":[..]}.
// Two alternatives with the same text (two partial UTF-8 pieces both shown as U+FFFD) keep the
// first: an object's keys must differ. As OpenAI's legacy API (and vLLM): the sampled token is
// always among its alternatives, so an object has up to logprobs + 1 keys (a token cut by a stop
// string is there when an alternative is its whole token: same logprob, its text begins the same).
void write_text_logprobs(json_writer& w, const std::vector<token_logprob_entry>& entries, int64_t offset) {
  w.key("logprobs").begin_object().key("tokens").begin_array();
  for (const auto& e : entries) w.value(e.piece);
  w.end_array().key("token_logprobs").begin_array();
  for (const auto& e : entries) write_lp(w, e.logprob);
  w.end_array().key("top_logprobs").begin_array();
  for (const auto& e : entries) {
    w.begin_object();
    std::vector<std::string> shown;  // the keys as written (U+FFFD for bytes that are not whole UTF-8)
    auto add = [&](const std::string& piece, float lp) {
      json_writer k;
      k.value(piece);
      std::string key = k.take();
      if (std::find(shown.begin(), shown.end(), key) != shown.end()) return;
      shown.push_back(std::move(key));
      w.key(piece);
      write_lp(w, lp);
    };
    for (const auto& [piece, lp] : e.top) add(piece, lp);
    const bool sampled_shown = std::any_of(e.top.begin(), e.top.end(), [&](const auto& alt) {
      return alt.second == e.logprob && alt.first.compare(0, e.piece.size(), e.piece) == 0;
    });
    if (!sampled_shown) add(e.piece, e.logprob);
    w.end_object();
  }
  w.end_array().key("text_offset").begin_array();
  for (const auto& e : entries) {
    w.value(offset);
    offset += utf8_chars(e.piece);
  }
  w.end_array().end_object();
}

void write_choice_logprobs(json_writer& w, bool chat, const std::vector<token_logprob_entry>& entries,
                           int64_t text_offset) {
  if (chat) write_chat_logprobs(w, entries);
  else write_text_logprobs(w, entries, text_offset);
}

// The choices of a whole answer: `choices` when there are several, else the one in `r`.
std::vector<choice_result> choices_of(const completion_result& r) {
  if (!r.choices.empty()) return r.choices;
  return {choice_result{r.text, r.finish_reason, {}, {}}};
}

std::string completion_json(const completion_result& r, bool chat) {
  json_writer w;
  w.begin_object();
  write_head(w, r, chat ? "chat.completion" : "text_completion");
  w.key("choices").begin_array();
  const auto choices = choices_of(r);
  for (size_t i = 0; i < choices.size(); ++i) {
    const auto& c = choices[i];
    w.begin_object().field("index", static_cast<int64_t>(i));
    if (chat) {
      w.key("message").begin_object().field("role", "assistant");
      // With calls and no text, `content` is null, as OpenAI answers it.
      if (c.text.empty() && (!c.tool_calls.empty() || c.calls_only)) w.key("content").null();
      else w.field("content", c.text);
      if (!c.tool_calls.empty()) {
        w.key("tool_calls").begin_array();
        for (const auto& tc : c.tool_calls) {
          w.begin_object().field("id", tc.id).field("type", "function");
          w.key("function").begin_object().field("name", tc.name).field("arguments", tc.arguments).end_object();
          w.end_object();
        }
        w.end_array();
      }
      w.end_object();
    } else {
      w.field("text", c.text);
    }
    if (r.logprobs) write_choice_logprobs(w, chat, c.logprobs, r.text_offset_base);
    else w.key("logprobs").null();
    w.field("finish_reason", c.finish_reason);
    w.end_object();
  }
  w.end_array();
  write_usage(w, r.usage);
  w.end_object();
  return w.take();
}

}  // namespace

std::string chat_completion_json(const completion_result& r) { return completion_json(r, true); }
std::string text_completion_json(const completion_result& r) { return completion_json(r, false); }

std::string sse_event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out += "data: ";
  out += json;
  out += "\n\n";
  return out;
}

namespace {

std::string chunk_json(const completion_result& head, const chunk_spec& c, bool chat) {
  json_writer w;
  w.begin_object();
  write_head(w, head, chat ? "chat.completion.chunk" : "text_completion");
  w.key("choices").begin_array();
  if (!c.no_choices) {
    w.begin_object().field("index", static_cast<int64_t>(c.index));
    if (chat) {
      w.key("delta").begin_object();
      if (c.role_only) {
        w.field("role", "assistant");
        if (c.calls_only) w.key("content").null();  // as OpenAI opens a reply of tool calls
        else w.field("content", "");
      } else if (c.call_index >= 0) {
        w.key("tool_calls").begin_array().begin_object().field("index", static_cast<int64_t>(c.call_index));
        if (!c.call_id.empty()) w.field("id", c.call_id).field("type", "function");
        w.key("function").begin_object();
        if (!c.call_name.empty()) w.field("name", c.call_name);
        w.field("arguments", c.call_arguments);
        w.end_object().end_object().end_array();
      } else if (!c.text.empty() || (c.finish_reason.empty() && !c.logprobs)) {
        // A chunk of logprobs only (a forced call's markup tokens, a special token) has no
        // content key: "" there would make an accumulated stream's content "" where the whole
        // answer says null.
        w.field("content", c.text);
      }
      w.end_object();
    } else {
      w.field("text", c.text);
    }
    if (head.logprobs && c.logprobs) write_choice_logprobs(w, chat, *c.logprobs, c.text_offset);
    else w.key("logprobs").null();
    w.key("finish_reason");
    if (c.finish_reason.empty()) w.null(); else w.value(c.finish_reason);
    w.end_object();
  }
  w.end_array();
  if (c.usage) write_usage(w, *c.usage);
  w.end_object();
  return w.take();
}

}  // namespace

std::string chat_chunk_json(const completion_result& head, const chunk_spec& c) { return chunk_json(head, c, true); }
std::string text_chunk_json(const completion_result& head, const chunk_spec& c) { return chunk_json(head, c, false); }

parsed_embedding parse_embedding_request(std::string_view body) {
  parsed_embedding out;
  dom::object obj;
  if (!detail::parse_object(body, obj, out.error)) return out;
  reader r{obj, std::nullopt, {}};
  detail::known_fields(r, {"input", "model", "encoding_format", "dimensions", "user"});
  embedding_query q;
  r.str("model", q.model);
  std::string format = "float";
  r.str("encoding_format", format);
  if (!r.err && format != "float" && format != "base64")
    r.err = bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
  q.base64 = format == "base64";
  r.integer("dimensions", q.dimensions);
  if (!r.err && r.get("dimensions") && q.dimensions <= 0)
    r.err = bad_request("'dimensions' must be a positive integer", "dimensions");
  std::string user;
  r.str("user", user);  // accepted and ignored: nothing here is per end user
  auto in = r.get("input");
  if (!r.err && !in) r.err = bad_request("'input' is required", "input");
  if (!r.err && in->is_string()) {
    q.inputs.emplace_back(std::string_view(*in));
    if (q.inputs.back().empty()) r.err = bad_request("'input' must not be empty", "input");
  } else if (!r.err && in->is_array()) {
    dom::array a(*in);
    if (a.size() == 0) r.err = bad_request("'input' must not be an empty array", "input");
    else if (a.size() > max_embedding_inputs)
      r.err = bad_request("'input' has more than " + std::to_string(max_embedding_inputs) + " items", "input");
    size_t i = 0;
    for (dom::element x : a) {
      if (r.err) break;
      const std::string at = "input[" + std::to_string(i++) + "]";
      const bool ids = x.is_number() || (x.is_array() && [&] {
                         for (dom::element y : dom::array(x))
                           if (!y.is_number()) return false;
                         return true;
                       }());
      if (ids) {
        // The embedder reads text with its own vocabulary: token ids of another one mean nothing to it.
        // LangChain's OpenAIEmbeddings sends tiktoken ids unless told not to: the message says how.
        r.err = bad_request("'input' as token ids is not supported: send the text (a string or an array of strings); "
                            "LangChain's OpenAIEmbeddings sends token ids unless check_embedding_ctx_length=False",
                            "input");
      } else if (!x.is_string()) {
        r.wrong(at, "a string", x);
      } else if (std::string_view(x).empty()) {
        r.err = bad_request("'" + at + "' must not be empty", at);
      } else {
        q.inputs.emplace_back(std::string_view(x));
      }
    }
  } else if (!r.err) {
    r.wrong("input", "a string or an array of strings", *in);
  }
  if (r.err) {
    out.error = *r.err;
    return out;
  }
  out.query = std::move(q);
  return out;
}

namespace {

std::string base64_of_floats(const std::vector<float>& v) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  bytes.reserve(v.size() * 4);
  for (float f : v) {
    uint32_t u;
    static_assert(sizeof u == sizeof f, "float is 32 bits");
    std::memcpy(&u, &f, sizeof u);
    for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>((u >> (8 * k)) & 0xFF));  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t x = 0;
    for (size_t k = 0; k < 3; ++k) x = (x << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out.push_back(k <= n ? abc[(x >> (18 - 6 * k)) & 0x3F] : '=');
  }
  return out;
}

}  // namespace

std::string embeddings_json(const embedding_result& r, bool base64) {
  json_writer w;
  w.begin_object().field("object", "list").key("data").begin_array();
  for (size_t i = 0; i < r.vectors.size(); ++i) {
    w.begin_object().field("object", "embedding").field("index", static_cast<int64_t>(i)).key("embedding");
    if (base64) {
      w.value(base64_of_floats(r.vectors[i]));
    } else {
      w.begin_array();
      for (float f : r.vectors[i]) w.value_float32(f);
      w.end_array();
    }
    w.end_object();
  }
  w.end_array().field("model", r.model);
  w.key("usage").begin_object().field("prompt_tokens", r.prompt_tokens).field("total_tokens", r.prompt_tokens);
  w.end_object().end_object();
  return w.take();
}

namespace {

void write_model(json_writer& w, const std::string& model_name, int64_t created) {
  w.begin_object().field("id", model_name).field("object", "model").field("created", created);
  w.field("owned_by", "troupe").end_object();
}

}  // namespace

std::string models_json(const std::vector<std::string>& model_names, int64_t created) {
  json_writer w;
  w.begin_object().field("object", "list").key("data").begin_array();
  for (const auto& name : model_names) write_model(w, name, created);
  w.end_array().end_object();
  return w.take();
}

std::string model_json(const std::string& model_name, int64_t created) {
  json_writer w;
  write_model(w, model_name, created);
  return w.take();
}

}  // namespace troupe::net
