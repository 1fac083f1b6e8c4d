#include "actors/admission/tool_prompt.hpp"

#include <algorithm>

namespace troupe::actors {

namespace {

std::string joined_ids(const std::vector<std::string>& ids) {
  std::string s;
  for (const auto& id : ids) s += (s.empty() ? "'" : ", '") + id + "'";
  return s;
}

// OpenAI's rule for a conversation with tool calls: an assistant message with tool_calls is
// followed by tool messages answering each of its calls (by tool_call_id), and a tool message
// answers a call of the assistant message before it. A history that breaks it is refused, as
// OpenAI refuses it, rather than rendered as a turn the model never had. Returns what is wrong,
// or nothing. (Llama 3's format has no call ids: there a tool message without one answers the
// next unanswered call.)
std::string unanswered_or_stray_results(const std::vector<chat_message>& messages, structured::tool_format f) {
  std::vector<std::string> calls, open;  // the last assistant turn's call ids; those unanswered
  auto unanswered = [&](size_t at) {
    return "an assistant message with tool_calls must be followed by tool messages answering each call: " +
           joined_ids(open) + " (tool_call_id) not answered" +
           (at < messages.size() ? " before messages[" + std::to_string(at) + "]" : std::string(" at the end of 'messages'"));
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (m.role == "tool") {
      if (m.tool_call_id.empty() && f != structured::tool_format::llama3)
        return "'" + at + ".tool_call_id' is required in a tool message";
      if (calls.empty())
        return "'" + at + "' is a tool message, but no assistant message with tool_calls comes before it";
      if (m.tool_call_id.empty() && f == structured::tool_format::llama3) {
        if (!open.empty()) open.erase(open.begin());
        continue;
      }
      auto it = std::find(open.begin(), open.end(), m.tool_call_id);
      if (it == open.end())
        return "'" + at + ".tool_call_id' \"" + m.tool_call_id + "\" answers no unanswered call of the assistant " +
               "message before it (its tool_calls: " + joined_ids(calls) + ")";
      open.erase(it);
      continue;
    }
    if (!open.empty()) return unanswered(i);
    calls.clear();
    for (const auto& c : m.tool_calls) calls.push_back(c.id);
    open = calls;
  }
  return open.empty() ? std::string() : unanswered(messages.size());
}

}  // namespace

result<tool_prompt> make_tool_prompt(const request_spec& spec, structured::tool_format f) {
  tool_prompt out;
  const bool offered = offers_tools(spec);
  if (!spec.tools.empty() && spec.messages.empty())
    return make_error("'tools' need a chat request ('messages')");
  std::vector<structured::tool_def> defs;
  defs.reserve(spec.tools.size());
  for (const auto& t : spec.tools) defs.push_back({t.name, t.description, t.parameters, t.strict});
  const bool strict = std::any_of(spec.tools.begin(), spec.tools.end(), [](const tool_spec& t) { return t.strict; });

  if (spec.tool_choice == tool_choice::required || spec.tool_choice == tool_choice::function) {
    if (spec.tools.empty()) return make_error("'tool_choice' \"" + spec.tool_choice + "\" needs 'tools'");
    // A structured output (response_format, text.format) holds the reply's text; a forced call
    // leaves none, its arguments keep to the function's schema: the call's grammar replaces it,
    // as OpenAI answers such a request (instructor's RESPONSES_TOOLS mode sends both).
    // "required": one call or more (OpenAI's words) while parallel calls are allowed, in a format
    // whose calls have markers, so that the streamer's guard can end a reply that repeats one
    // (actors/streamer/filters/repeated_call_guard.hpp); else, and for a named function, one call.
    const bool named = spec.tool_choice == tool_choice::function;
    const bool many = !named && spec.parallel_tool_calls && !structured::call_markers(f).first.empty();
    auto g = structured::calls_grammar(f, defs, named ? spec.tool_choice_name : "", many);
    if (!g) return make_error(g.error());
    out.constraint = {structured::kind::grammar, std::move(*g)};
  } else if (spec.tool_choice == tool_choice::automatic && spec.constraint.empty() &&
             (strict || !spec.parallel_tool_calls)) {
    // OpenAI's `strict`: a call's arguments follow the schema whether or not a call is forced;
    // `parallel_tool_calls: false`: at most one call. Either way the reply is held to free text,
    // then calls (one at most). With a structured output the reply is held to it, which leaves
    // no call to break a schema or to be a second one.
    if (!structured::auto_calls_constrainable(f))
      return make_error(std::string(strict ? "'tools[].function.strict'" : "'parallel_tool_calls' false") +
                        " under tool_choice \"auto\" is not served for the " + structured::to_string(f) +
                        " call format (its calls are not told from text by a marker); force the call with "
                        "tool_choice, or leave it out");
    auto g = structured::auto_calls_grammar(f, defs, spec.parallel_tool_calls);
    if (!g) return make_error(g.error());
    out.constraint = {structured::kind::grammar, std::move(*g)};
  } else if (spec.tool_choice != tool_choice::automatic && spec.tool_choice != tool_choice::none) {
    return make_error("'tool_choice' must be \"auto\", \"none\", \"required\" or a function, not \"" + spec.tool_choice + "\"");
  }

  if (auto bad = unanswered_or_stray_results(spec.messages, f); !bad.empty()) return make_error(bad);

  bool system_done = false;
  const std::string offer = offered ? structured::tools_prompt(f, defs) : std::string();
  for (size_t i = 0; i < spec.messages.size(); ++i) {
    const auto& m = spec.messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    chat_message c;
    if (m.role == "tool") {
      c.role = structured::tool_result_role(f);
      c.content = structured::tool_result_text(f, m.content);
      // Consecutive tool results are one turn, as the templates write them.
      if (!out.messages.empty() && i > 0 && spec.messages[i - 1].role == "tool" && out.messages.back().role == c.role) {
        out.messages.back().content += "\n" + c.content;
        continue;
      }
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      std::vector<structured::function_call> calls;
      for (const auto& tc : m.tool_calls) calls.push_back({tc.name, tc.arguments});
      c.role = "assistant";
      c.name = m.name;
      c.content = m.content.empty() ? structured::calls_text(f, calls) : m.content + "\n" + structured::calls_text(f, calls);
    } else {
      c.role = m.role;
      c.content = m.content;
      c.name = m.name;
      if (m.role == "system" && !system_done && offered) {
        c.content += "\n\n" + offer;
        system_done = true;
      }
    }
    out.messages.push_back(std::move(c));
  }
  if (offered && !system_done) out.messages.insert(out.messages.begin(), chat_message{"system", offer, {}, {}, {}});
  return out;
}

}  // namespace troupe::actors
