#include "actors/streamer/streamer_state.hpp"

#include <algorithm>

#include "actors/streamer/filters/repeated_call_guard.hpp"

namespace troupe::actors {

streamer_state::streamer_state(streamer_config cfg, std::shared_ptr<const text_codec> codec)
    : cfg_(std::move(cfg)), codec_(std::move(codec)) {
  auto chain = filter_chain_maker::make(cfg_.filters);
  if (chain) filters_ = std::move(chain.value());
  else filters_error_ = chain.error();
}

streamer_state::streamer_state(streamer_config cfg, std::shared_ptr<const text_codec> codec,
                               std::shared_ptr<const filter_chain_maker> chain, std::string chain_error)
    : cfg_(std::move(cfg)), codec_(std::move(codec)), filters_(std::move(chain)), filters_error_(std::move(chain_error)) {
  if (!filters_ && filters_error_.empty()) filters_error_ = "no output filters were given";
}

void streamer_state::set_filters(std::shared_ptr<const filter_chain_maker> chain, std::vector<filter_spec> specs) {
  filters_ = std::move(chain);
  filters_error_ = filters_ ? std::string() : std::string("no output filters were given");
  cfg_.filters = std::move(specs);
}

void streamer_state::open(const stream_open& o) {
  if (streams_.count(o.id)) return;
  stream s;
  s.info = o;
  s.dec = codec_->decoder();
  s.stops = model::stop_matcher(o.stop);
  if (filters_) s.filters = filters_->make_chain(filter_context{o.id, o.tenant, o.prompt_tokens});
  // The request's own guard goes first: the configured filters see the calls it lets through.
  if (filters_ && !o.call_open.empty() && !o.call_close.empty())
    s.filters.insert(s.filters.begin(), filters::make_repeated_call_guard(o.call_open, o.call_close));
  streams_.emplace(o.id, std::move(s));
  // Filters that did not build would let text out unfiltered: such a stream fails instead.
  if (!filters_) {
    fx_.drop.push_back(o.id);
    fail(o.id, errc::internal, "the output filters are not usable: " + filters_error_);
  }
}

void streamer_state::token(stream& s, const token_out& t, int64_t now_us) {
  if (s.ending) return;
  token_event ev;
  ev.request_id = s.info.id;
  ev.index = s.next_index++;
  ev.token = t.token;
  ev.text = s.stops.push(s.dec->push(t.token));
  ev.logprob = t.logprob;
  ev.top = t.top;
  filter_decision filtered;
  if (!s.filters.empty()) filtered = run_filters(s.filters, ev.text, false);
  s.tokens.push_back(t.token);
  s.logprobs.push_back(t.logprob);
  if (!s.from_cache) s.so_far = t.so_far;
  if (s.first_token_us == 0) s.first_token_us = now_us;
  s.pending.emplace_back(std::move(ev));
  ++s.pending_tokens;
  if (filtered.end) {
    s.filter_ended = true;
    s.filters.clear();
    if (!s.from_cache) fx_.drop.push_back(s.info.id);
    end(s, filtered.finish_reason, s.so_far, now_us);
    return;
  }
  if (s.stops.stopped()) {
    // The stop string is found: the scheduler can forget the sequence now.
    if (!s.from_cache) fx_.drop.push_back(s.info.id);
    end(s, finish::stop, s.so_far, now_us);
    return;
  }
  pump(s);
}

void streamer_state::end(stream& s, const std::string& reason, const seq_figures& fig, int64_t now_us) {
  if (s.ending) return;
  done_event d;
  d.request_id = s.info.id;
  d.finish_reason = reason;
  if (!s.stops.stopped() && !s.filter_ended) d.text = s.stops.push(s.dec->flush()) + s.stops.flush();
  if (!s.filters.empty()) {
    // The last of the text, and what the filters held back.
    auto f = run_filters(s.filters, d.text, true);
    if (f.end) {
      d.finish_reason = f.finish_reason;
      s.filter_ended = true;
    }
    s.filters.clear();
  }
  d.usage.prompt_tokens = s.info.prompt_tokens;
  d.usage.completion_tokens = s.next_index;
  // (A continuation on another replica counts the tokens it was given as prompt.)
  d.usage.cached_prompt_tokens = std::min(fig.usage.cached_prompt_tokens, s.info.prompt_tokens);
  d.usage.speculative_proposed = fig.usage.speculative_proposed;
  d.usage.speculative_accepted = fig.usage.speculative_accepted;
  d.timings.queue_ms = fig.queue_ms;
  d.timings.ttft_ms = s.first_token_us ? static_cast<double>(s.first_token_us - s.info.arrival_us) / 1000.0 : 0.0;
  d.timings.total_ms = static_cast<double>(now_us - s.info.arrival_us) / 1000.0;
  d.timings.preemptions = fig.preemptions;
  d.cached = s.from_cache;
  d.similarity = s.from_cache ? s.similarity : 0.0f;
  s.finish_reason = d.finish_reason;
  s.pending.emplace_back(std::move(d));
  s.ending = true;
  pump(s);
}

void streamer_state::drop_pending(stream& s) {
  const auto n = static_cast<size_t>(s.pending_tokens);
  s.next_index -= s.pending_tokens;
  s.tokens.resize(s.tokens.size() - std::min(n, s.tokens.size()));
  s.logprobs.resize(s.logprobs.size() - std::min(n, s.logprobs.size()));
  s.pending.clear();
  s.pending_tokens = 0;
}

void streamer_state::pump(stream& s) {
  const int32_t cap = cfg_.buffer_tokens;
  while (!s.pending.empty()) {
    auto& front = s.pending.front();
    const bool is_token = std::holds_alternative<token_event>(front);
    if (is_token && cap > 0 && s.unacked >= cap) break;
    fx_.events.push_back(std::move(front));
    s.pending.pop_front();
    if (is_token) {
      ++s.unacked;
      --s.pending_tokens;
      ++st_.token_events;
    } else {
      close(s.info.id, false);  // the done event went out: the stream is over
      return;
    }
  }
  if (cap <= 0) return;
  // While the done event waits behind tokens, the sequence is gone from the scheduler already.
  const bool live = !s.from_cache && !s.ending;
  if (!s.paused && buffered(s) >= cap) {
    s.paused = true;
    ++s.pause_serial;
    ++st_.pauses;
    if (live) fx_.pause.push_back(s.info.id);
    if (cfg_.slow_consumer_timeout_ms > 0) fx_.slow_checks.emplace_back(s.info.id, s.pause_serial);
  } else if (s.paused && buffered(s) <= cap / 2) {
    s.paused = false;
    if (live) fx_.resume.push_back(s.info.id);
  }
}

void streamer_state::close(uint64_t id, bool /*delivered_error*/) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  auto& s = it->second;
  closed_stream c;
  c.id = id;
  c.finish_reason = s.finish_reason;
  c.tokens = std::move(s.tokens);
  c.logprobs = std::move(s.logprobs);
  c.cached = s.from_cache;
  c.filtered = s.filter_ended;
  fx_.closed.push_back(std::move(c));
  ++st_.streams_closed;
  streams_.erase(it);
}

void streamer_state::on_output(const step_output& o, int64_t now_us) {
  for (const auto& t : o.tokens)
    if (auto it = streams_.find(t.id); it != streams_.end()) token(it->second, t, now_us);
  for (const auto& f : o.finished)
    if (auto it = streams_.find(f.id); it != streams_.end())
      end(it->second, f.reason, seq_figures{f.usage, f.queue_ms, f.preemptions}, now_us);
  for (const auto& f : o.failed) fail(f.id, f.code, f.message);
}

void streamer_state::on_replay(const cache_replay& r, int64_t now_us) {
  auto it = streams_.find(r.id);
  if (it == streams_.end()) return;
  it->second.from_cache = true;
  it->second.similarity = r.similarity;
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    it = streams_.find(r.id);
    if (it == streams_.end() || it->second.ending) return;
    token_out t;
    t.id = r.id;
    t.token = r.tokens[i];
    t.logprob = i < r.logprobs.size() ? r.logprobs[i] : 0.0f;
    token(it->second, t, now_us);
  }
  it = streams_.find(r.id);
  if (it != streams_.end()) end(it->second, r.finish_reason, {}, now_us);
}

void streamer_state::on_ack(uint64_t id, int32_t n, int64_t) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  it->second.unacked = std::max(0, it->second.unacked - n);
  pump(it->second);
}

void streamer_state::cancel(uint64_t id, int64_t now_us) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  auto& s = it->second;
  if (!s.ending && !s.from_cache) fx_.drop.push_back(id);
  drop_pending(s);
  s.ending = false;
  s.finish_reason.clear();
  // Whatever the stream had, it ends as cancelled now; the held-back text is not released.
  s.stops = model::stop_matcher(std::vector<std::string>{});
  s.dec = codec_->decoder();
  s.filters.clear();
  end(s, finish::cancelled, s.so_far, now_us);
}

void streamer_state::consumer_gone(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  if (!it->second.ending && !it->second.from_cache) fx_.drop.push_back(id);
  it->second.finish_reason = finish::cancelled;
  close(id, false);
}

void streamer_state::fail(uint64_t id, const std::string& code, const std::string& message) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  auto& s = it->second;
  s.pending.clear();
  s.pending_tokens = 0;
  fx_.events.emplace_back(error_event{id, code, message, 0});
  s.finish_reason.clear();
  close(id, true);
}

void streamer_state::abort(uint64_t id, const std::string& code, const std::string& message) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  if (!it->second.ending && !it->second.from_cache) fx_.drop.push_back(id);
  fail(id, code, message);
}

void streamer_state::end_by_filter(uint64_t id, const std::string& finish_reason, int64_t now_us) {
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second.ending) return;
  auto& s = it->second;
  if (!s.from_cache) fx_.drop.push_back(id);
  drop_pending(s);  // the filter actor drops what it would have received
  s.unacked = 0;      // nor are those acknowledged: the done event must not wait for credit
  s.stops = model::stop_matcher(std::vector<std::string>{});
  s.dec = codec_->decoder();
  s.filters.clear();
  s.filter_ended = true;
  s.paused = false;
  end(s, finish_reason.empty() ? std::string(finish::filtered) : finish_reason, s.so_far, now_us);
}

void streamer_state::fail_all(const std::string& code, const std::string& message) {
  std::vector<uint64_t> ids;
  for (const auto& [id, s] : streams_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (auto id : ids) fail(id, code, message);
}

void streamer_state::check_slow(uint64_t id, uint64_t serial, int64_t now_us) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  auto& s = it->second;
  if (!s.paused || s.pause_serial != serial) return;
  ++st_.slow_consumers;
  if (!s.ending && !s.from_cache) fx_.drop.push_back(id);
  drop_pending(s);
  s.unacked = 0;  // the done event must not wait for credit
  s.ending = false;
  s.stops = model::stop_matcher(std::vector<std::string>{});
  s.dec = codec_->decoder();
  s.filters.clear();
  s.paused = false;
  end(s, finish::slow_consumer, s.so_far, now_us);
}

streamer_effects streamer_state::take_effects() {
  streamer_effects e;
  std::swap(e, fx_);
  return e;
}

streamer_stats streamer_state::stats() const {
  streamer_stats s = st_;
  s.open_streams = static_cast<int32_t>(streams_.size());
  for (const auto& [id, x] : streams_) s.paused_streams += x.paused ? 1 : 0;
  return s;
}

}  // namespace troupe::actors
