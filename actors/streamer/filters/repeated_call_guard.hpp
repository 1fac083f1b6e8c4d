#pragma once
// A request's guard against repeated tool calls (not a configured filter: admission asks for it,
// stream_open::call_open / call_close, when the reply may make calls in a format whose calls sit
// between markers). A call that repeats an earlier call of the same reply word for word ends the
// reply there, the repeat dropped: running the same call twice in one turn is never what an
// agent wants, and a small model given room for several calls (tool_choice "required" with
// parallel_tool_calls) tends to write its one call again and again until max_tokens.
//
// The first call streams as it is written; each later one is held back from its opening marker
// until its closing marker settles whether it repeats (and so arrives whole). Text outside calls
// passes, but for a tail that may be the start of an opening marker. The stream ends with finish
// reason "stop" (the API's "tool_calls"). Held text goes out when the stream ends otherwise (a
// call cut by max_tokens stays as cut).
#include <memory>
#include <string>

#include "actors/streamer/filters/stream_filter.hpp"

namespace troupe::actors::filters {

std::unique_ptr<stream_filter> make_repeated_call_guard(std::string open_marker, std::string close_marker);

}  // namespace troupe::actors::filters
