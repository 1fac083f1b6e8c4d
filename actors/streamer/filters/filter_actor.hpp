#pragma once
// Output filter actors: an output filter that is an actor of its own, standing on the path
// between the streamer and each stream's consumer. Where an in-process filter
// (stream_filter.hpp) runs inside the streamer and must answer at once for every stream, a filter
// actor has its own mailbox and thread: it can do real work per piece of text (a classifier, a
// lookup) without holding up the other streams, and keep state across streams.
//
// Configured like any filter (`[[streamer.filters]]` with `name` and `options`); filter actors
// come after the in-process filters in the list. One actor is started per configured filter
// actor when the config takes effect and serves every stream opened under that config; on a
// reload that changes it, streams already running keep the actor they started with, which is
// stopped once its last stream has closed.
//
// The protocol, per stream, in this order:
//   (open_atom, filter_open)   before any event: the stream's context, where its events go on
//                              next (`next`: the streamer, which relays them to the next filter
//                              actor or the consumer), and the streamer (to end the stream)
//   token_event ...            pass each one on to `next`, in order, one for one, keeping its
//                              request_id and index (the text may be changed, shortened, or
//                              emptied while held back): the consumer acknowledges token events
//                              by count, which is the flow control
//   done_event | error_event   pass it on (with any held-back text appended to done.text) and
//                              forget the stream
// To end a stream early, send the streamer (filter_end_atom, id, finish_reason), drop the
// stream's later token events, and pass its done_event on with that finish reason and no text.
// If the actor stops, the streams going through it fail with an error naming it, and the
// streamer starts a new one for the streams that follow. If it holds an event of a stream
// longer than streamer.filter_timeout_ms without passing it on (it stopped answering without
// stopping), that stream fails with an error naming it and the timeout, its sequence is dropped,
// every filter actor of its chain gets an error_event for it (forget it), and whatever it passes
// on for it later is dropped; the actor goes on serving the other streams.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/typed_actor.hpp>

#include "actors/event_sink.hpp"
#include "actors/links.hpp"
#include "actors/streamer/filters/stream_filter.hpp"

namespace troupe::actors {

using filter_end_atom = caf::atom_constant<caf::atom("filterend")>;

// What a filter actor may tell the streamer: end stream `id` with this finish reason.
using filter_end_sink = caf::typed_actor<caf::reacts_to<filter_end_atom, uint64_t, std::string>>;

struct filter_open {
  filter_context context;
  event_sink next;           // the next filter actor, or the consumer
  filter_end_sink streamer;  // to end the stream early
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, filter_open& x) {
  return f(caf::meta::type_name("filter_open"), x.context, x.next, x.streamer);
}

using filter_actor = caf::typed_actor<caf::reacts_to<open_atom, filter_open>, caf::reacts_to<token_event>,
                                      caf::reacts_to<done_event>, caf::reacts_to<error_event>>;

// Starts the actor (when the config takes effect, and again if it stops).
using filter_actor_spawner = std::function<filter_actor(caf::actor_system&)>;
// Reads and checks the options without starting anything; the error names the filter and option.
using filter_actor_factory = std::function<result<filter_actor_spawner>(const option_map& options)>;

// The process-wide registry of filter actors (none built in). Its names and the in-process
// filters' names are one namespace.
named_registry<filter_actor_factory>& filter_actor_registry();

// A configured filter actor, ready to start.
struct filter_actor_part {
  std::string name;
  filter_actor_spawner spawn;
};

// The configured output filters, checked: the in-process ones as a chain maker, then the actors.
struct output_filters {
  std::shared_ptr<const filter_chain_maker> in_process;
  std::vector<filter_actor_part> actors;
  // Each name must be an in-process filter or a filter actor (an unknown one lists both), and
  // no in-process filter may follow a filter actor.
  static result<output_filters> make(const std::vector<filter_spec>& specs);
};

// Every name a [[streamer.filters]] entry may take.
std::vector<std::string> output_filter_names();

}  // namespace troupe::actors
