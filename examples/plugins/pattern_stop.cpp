// Shows: a stream filter built as an actor (actors/streamer/filters/filter_actor.hpp): it ends a stream when a
// regular expression matches its text, before any of the matching text goes out. Tokens bring
// text a few bytes at a time, so the actor holds the last `window` bytes of each stream back: a
// match of up to that many bytes is seen whole before any of it is released. The text before the
// match goes out; the actor tells the streamer to end the stream (the scheduler drops the
// sequence), drops the token events still on their way, and passes the done event on with
// `finish_reason`. Regular expressions can be slow on long text; as an actor, the search runs
// here, not in the streamer that every stream shares.
//
//   plugins = ["build/examples/libtroupe_pattern_stop.so"]
//   [[streamer.filters]]
//   name = "pattern_stop"
//   options = { pattern = "[0-9]{3}-[0-9]{4}", window = 32, finish_reason = "filtered" }
// Options: pattern (required, ECMAScript syntax; must not match empty text), window (bytes,
// default 64), finish_reason (default "filtered"), ignore_case (default false).
#include <memory>
#include <regex>
#include <string>
#include <unordered_map>

#include <caf/all.hpp>

#include "actors/plugins/plugin_api.hpp"
#include "actors/request.hpp"

namespace {

using namespace troupe;
using namespace troupe::actors;

struct pattern_options {
  std::regex re;
  size_t window = 64;
  std::string finish_reason;
};

// One stream, as this actor sees it.
struct stream_view {
  event_sink next;
  filter_end_sink streamer;
  std::string held;     // text not released yet
  bool ended = false;   // the pattern matched: the streamer is ending the stream
};

struct pattern_stop_state {
  std::unordered_map<uint64_t, stream_view> streams;
  static inline const char* name = "pattern_stop";
};

// Releases what may go out of `s.held` (all of it at the end), or the text before a match.
// Answers whether the pattern matched.
bool release(const pattern_options& o, stream_view& s, std::string& out, bool at_end) {
  std::smatch m;
  if (std::regex_search(s.held, m, o.re)) {
    out = s.held.substr(0, static_cast<size_t>(m.position(0)));
    s.held.clear();
    return true;
  }
  size_t cut = at_end ? s.held.size() : (s.held.size() > o.window ? s.held.size() - o.window : 0);
  // Never split a UTF-8 character: back up to the start of the one the cut falls in.
  while (cut > 0 && cut < s.held.size() && (static_cast<unsigned char>(s.held[cut]) & 0xC0) == 0x80) --cut;
  out = s.held.substr(0, cut);
  s.held.erase(0, cut);
  return false;
}

filter_actor::behavior_type pattern_stop(filter_actor::stateful_pointer<pattern_stop_state> self,
                                         std::shared_ptr<const pattern_options> o) {
  return {
      [=](open_atom, filter_open& f) {
        self->state.streams[f.context.id] = stream_view{std::move(f.next), std::move(f.streamer), {}, false};
      },
      [=](token_event& ev) {
        auto it = self->state.streams.find(ev.request_id);
        if (it == self->state.streams.end() || it->second.ended) return;  // ending: dropped
        auto& s = it->second;
        s.held += ev.text;
        if (release(*o, s, ev.text, false)) {
          s.ended = true;
          self->send(s.streamer, filter_end_atom::value, ev.request_id, o->finish_reason);
        }
        self->send(s.next, std::move(ev));
      },
      [=](done_event& d) {
        auto it = self->state.streams.find(d.request_id);
        if (it == self->state.streams.end()) return;
        auto& s = it->second;
        if (s.ended) {
          d.finish_reason = o->finish_reason;
          d.text.clear();
        } else {
          s.held += d.text;  // the last of the text may complete a match
          if (release(*o, s, d.text, true)) d.finish_reason = o->finish_reason;
        }
        self->send(s.next, std::move(d));
        self->state.streams.erase(it);
      },
      [=](error_event& e) {
        auto it = self->state.streams.find(e.request_id);
        if (it == self->state.streams.end()) return;
        self->send(it->second.next, std::move(e));
        self->state.streams.erase(it);
      },
  };
}

result<filter_actor_spawner> make_pattern_stop(const option_map& options) {
  option_reader rd("filter actor 'pattern_stop'", options);
  auto o = std::make_shared<pattern_options>();
  const std::string pattern = rd.string("pattern");
  const int64_t window = rd.integer("window", 64);
  o->finish_reason = rd.string("finish_reason", finish::filtered);
  const bool icase = rd.boolean("ignore_case", false);
  if (pattern.empty()) rd.fail("pattern", "give the regular expression that ends a stream");
  if (window < 1 || window > 65536) rd.fail("window", "must be 1..65536 bytes");
  if (o->finish_reason.empty()) rd.fail("finish_reason", "must not be empty");
  if (auto s = rd.finish(); !s) return make_error(s.error());
  try {
    auto flags = std::regex::ECMAScript | std::regex::optimize;
    if (icase) flags |= std::regex::icase;
    o->re = std::regex(pattern, flags);
  } catch (const std::regex_error& e) {
    return make_error("filter actor 'pattern_stop': option 'pattern': not a valid regular expression: " +
                      std::string(e.what()));
  }
  if (std::regex_search(std::string(), o->re))
    return make_error("filter actor 'pattern_stop': option 'pattern': it matches empty text, so it would end every stream at once");
  o->window = static_cast<size_t>(window);
  std::shared_ptr<const pattern_options> shared = std::move(o);
  return filter_actor_spawner([shared](caf::actor_system& sys) { return sys.spawn(pattern_stop, shared); });
}

}  // namespace

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_filter_actor("pattern_stop", make_pattern_stop);
  return 0;
}
