#pragma once
// The consumer side of a stream: whoever submits a request names an event sink, and the
// streamer sends it the request's events (token_event*, then done_event or error_event).
// The consumer acknowledges token events it has taken (streamer's ack message): that is the
// flow control. The in-process client (client.cpp) spawns one per request, its bridge actor;
// net/ has none of its own: app/serve implements net::inference over that client.
#include <caf/typed_actor.hpp>

#include "actors/request.hpp"

namespace troupe::actors {

using event_sink = caf::typed_actor<caf::reacts_to<token_event>, caf::reacts_to<done_event>,
                                    caf::reacts_to<error_event>>;

}  // namespace troupe::actors
