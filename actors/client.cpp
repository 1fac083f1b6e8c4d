#include "actors/client.hpp"

#include <caf/all.hpp>

#include "actors/admission/admission.hpp"
#include "actors/detail/caf_util.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/streamer/streamer.hpp"

namespace troupe::actors {

// One request's bridge actor: it submits the request with itself as the event sink and hands
// the events to the stream (or the handler). It watches the streamer, so that a request cannot
// wait forever on a streamer that went away.
using bridge_actor = event_sink::extend<caf::reacts_to<cancel_atom>>;

namespace detail {

struct stream_core {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<event> queue;
  bool ended = false;       // the last event is in the queue (or was handed over)
  uint64_t id = 0;
  event_handler handler;    // push mode
  bool manual_ack = false;  // push mode: the consumer acknowledges (request_handle::ack)
  bridge_actor bridge;
  bool cancel_requested = false;  // before `bridge` was set
  streamer_actor streamer;

  // The one way a cancel travels: to the bridge, which asks the streamer once admission has
  // given the request an id (and remembers it until then).
  void cancel() {
    bridge_actor b;
    {
      std::lock_guard<std::mutex> lock(mu);
      b = bridge;
      if (!b) cancel_requested = true;
    }
    if (b) caf::anon_send(b, cancel_atom::value);
  }

  void push(event e, bool last) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(std::move(e));
      ended = ended || last;
    }
    cv.notify_all();
  }
};

}  // namespace detail

namespace {

struct bridge_state {
  std::shared_ptr<detail::stream_core> core;
  streamer_actor streamer;
  uint64_t id = 0;
  bool cancel_wanted = false;
  bool over = false;
  static inline const char* name = "troupe.client_bridge";
};

using bridge_ptr = bridge_actor::stateful_pointer<bridge_state>;

void deliver(bridge_ptr self, event e) {
  auto& st = self->state;
  if (st.over || !st.core) return;
  const bool is_token = std::holds_alternative<token_event>(e);
  const bool last = !is_token;
  auto core = st.core;
  if (core->handler) {
    core->handler(e);
    if (is_token && st.streamer && !core->manual_ack) self->send(st.streamer, ack_atom::value, st.id, int32_t{1});
    if (last) {
      // The handler is not called again, and it often holds what holds this request's handle
      // (a WebSocket stream's record keeps the handle for acks and cancels, and the handler
      // keeps the record): dropped here, or that cycle would keep the record, this core and
      // the bridge for good (about 4 KB a WebSocket request in the issue 24 soak).
      event_handler gone;
      std::lock_guard<std::mutex> lock(core->mu);
      core->ended = true;
      gone = std::move(core->handler);
    }
  } else {
    core->push(std::move(e), last);
  }
  if (last) {
    st.over = true;
    st.core.reset();
    // CAF 0.17 leaves a monitor at the watched actor when the watcher quits, and that monitor's
    // weak reference keeps the watcher's memory: without this, every request's bridge (about
    // 1 KB) stayed allocated until the streamer itself went away.
    if (st.streamer) self->demonitor(st.streamer.address());
    self->quit();
  }
}

bridge_actor::behavior_type bridge_fn(bridge_ptr self, std::shared_ptr<detail::stream_core> core, request_spec spec,
                                      admission_actor adm, streamer_actor streamer, int64_t submit_timeout_ms) {
  auto& st = self->state;
  st.core = std::move(core);
  st.streamer = streamer;
  bridge_actor::behavior_type behavior{
      [=](token_event& e) { deliver(self, std::move(e)); },
      [=](done_event& e) { deliver(self, std::move(e)); },
      [=](error_event& e) { deliver(self, std::move(e)); },
      [=](cancel_atom) {
        auto& s = self->state;
        if (s.over) return;
        if (s.id != 0)
          self->send(s.streamer, cancel_atom::value, s.id);
        else
          s.cancel_wanted = true;
      },
  };
  if (!adm || !streamer) {
    deliver(self, error_event{0, errc::internal, "the pipeline is not running", 0});
    return behavior;
  }
  self->monitor(streamer);
  self->set_down_handler([self](caf::down_msg&) {
    deliver(self, error_event{self->state.id, errc::internal, "the pipeline's streamer stopped", 0});
  });
  self->request(adm, detail::ms(submit_timeout_ms), submit_atom::value, std::move(spec),
                caf::actor_cast<event_sink>(self))
      .then(
          [self](submit_reply& r) {
            auto& s = self->state;
            if (r.id == 0) {
              deliver(self, std::move(r.error));
              return;
            }
            s.id = r.id;
            if (s.core) {
              std::lock_guard<std::mutex> lock(s.core->mu);
              s.core->id = r.id;
            }
            if (s.cancel_wanted) self->send(s.streamer, cancel_atom::value, r.id);
          },
          [self](caf::error& e) {
            deliver(self, error_event{0, errc::internal, "admission did not answer: " + detail::describe(e), 0});
          });
  return behavior;
}

}  // namespace

bool add_event(completion& c, const event& e) {
  if (auto* t = std::get_if<token_event>(&e)) {
    c.id = t->request_id;
    c.tokens.push_back(t->token);
    c.text += t->text;
    return false;
  }
  if (auto* d = std::get_if<done_event>(&e)) {
    c.id = d->request_id;
    c.text += d->text;
    c.finish_reason = d->finish_reason;
    c.usage = d->usage;
    c.timings = d->timings;
    c.cached = d->cached;
    c.similarity = d->similarity;
    return true;
  }
  c.error = std::get<error_event>(e);
  if (c.error.request_id) c.id = c.error.request_id;
  return true;
}

stream::~stream() {
  if (!ended()) cancel();
}

uint64_t stream::id() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->id;
}

bool stream::ended() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->ended;
}

std::optional<event> stream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(core_->mu);
  core_->cv.wait_for(lock, timeout, [&] { return !core_->queue.empty() || core_->ended; });
  if (core_->queue.empty()) return std::nullopt;  // timed out, or every event was taken
  event e = std::move(core_->queue.front());
  core_->queue.pop_front();
  const uint64_t id = core_->id;
  auto streamer = core_->streamer;
  lock.unlock();
  if (std::holds_alternative<token_event>(e) && streamer)
    caf::anon_send(streamer, ack_atom::value, id ? id : std::get<token_event>(e).request_id, int32_t{1});
  return e;
}

completion stream::wait(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    auto e = next(std::max(left, std::chrono::milliseconds(0)));
    if (!e) {
      cancel();
      partial_.error = error_event{id(), errc::timeout, "no end of the stream within the time given", 0};
      return partial_;
    }
    if (add_event(partial_, *e)) return partial_;
  }
}

void stream::cancel() { core_->cancel(); }

void request_handle::cancel() const {
  if (core_) core_->cancel();
}

void request_handle::ack(int32_t n) const {
  if (!core_ || n <= 0) return;
  streamer_actor s;
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    s = core_->streamer;
    id = core_->id;
  }
  if (s && id) caf::anon_send(s, ack_atom::value, id, n);
}

uint64_t request_handle::id() const {
  if (!core_) return 0;
  std::lock_guard<std::mutex> lock(core_->mu);
  return core_->id;
}

client::client(const pipeline& p, client_options o) : sys_(p.system()), cell_(p.cell()), opts_(o) {}

std::shared_ptr<detail::stream_core> client::start(request_spec spec, event_handler on_event, ack_mode acks) {
  auto core = std::make_shared<detail::stream_core>();
  core->handler = std::move(on_event);
  core->manual_ack = core->handler && acks == ack_mode::manual;
  const auto l = cell_->get();
  auto streamer = caf::actor_cast<streamer_actor>(l.streamer);
  core->streamer = streamer;
  auto bridge = sys_.spawn(bridge_fn, core, std::move(spec), caf::actor_cast<admission_actor>(l.admission), streamer,
                           opts_.submit_timeout_ms);
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> lock(core->mu);
    core->bridge = bridge;
    cancel_now = core->cancel_requested;
  }
  if (cancel_now) caf::anon_send(bridge, cancel_atom::value);
  return core;
}

std::unique_ptr<stream> client::submit(request_spec spec) {
  return std::make_unique<stream>(start(std::move(spec), {}, ack_mode::on_handoff));
}

request_handle client::submit(request_spec spec, event_handler on_event, ack_mode acks) {
  return request_handle(start(std::move(spec), std::move(on_event), acks));
}

}  // namespace troupe::actors
