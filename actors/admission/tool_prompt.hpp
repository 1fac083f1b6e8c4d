#pragma once
// What admission makes of a chat request's tools (request_spec::tools, tool_choice) before the
// chat template renders it: the tools offered in the system turn, earlier calls and tool results
// written as the model's format writes them (structured/tool_calls.hpp), and — for `required` or a
// named function — the grammar the reply is constrained to.
#include <vector>

#include "actors/request.hpp"
#include "common/result.hpp"
#include "structured/tool_calls.hpp"

namespace troupe::actors {

struct tool_prompt {
  std::vector<chat_message> messages;     // plain system / user / assistant turns
  structured::constraint_spec constraint; // a forced call's grammar; empty otherwise
};

// Whether the reply may make calls: tools offered, and tool_choice not "none".
inline bool offers_tools(const request_spec& spec) {
  return !spec.tools.empty() && spec.tool_choice != tool_choice::none;
}

// Errors name the field: a tool message without tool_call_id, a tool_choice naming no tool,
// tools on a request without messages, a forced call combined with a response_format.
result<tool_prompt> make_tool_prompt(const request_spec& spec, structured::tool_format f);

}  // namespace troupe::actors
