#include "net/resume_store.hpp"

#include <vector>

#include "net/auth.hpp"
#include "net/ws_protocol.hpp"

namespace troupe::net {

void stream_record::set_cancel(cancel_fn c) {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_ = std::move(c);
}

void stream_record::set_ack(ack_fn a) {
  int32_t early = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ack_ = std::move(a);
    std::swap(early, early_acks_);
  }
  if (early > 0) ack(early);
}

void stream_record::ack(int32_t n) {
  if (n <= 0) return;
  ack_fn a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    a = ack_;
    if (!a) early_acks_ += n;
  }
  if (a) a(n);
}

void stream_record::written(uint64_t gen) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gen != attach_gen_ || handed_ <= 0) return;  // acknowledged when its connection detached
    --handed_;
  }
  ack(1);
}

void stream_record::cancel() {
  cancel_fn c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = cancel_;
  }
  if (c) c();
}

void stream_record::add_token(int32_t index, std::string text, std::string logprobs) {
  bool now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sink_ && index > from_index_) {
      ++handed_;
      std::weak_ptr<stream_record> w = weak_from_this();
      const uint64_t gen = attach_gen_;
      sink_(token_frame(id_, index, text, logprobs), [w, gen] {
        if (auto r = w.lock()) r->written(gen);
      });
    } else {
      now = true;
    }
    tokens_.push_back({index, std::move(text), std::move(logprobs)});
    while (tokens_.size() > keep_) tokens_.pop_front();
  }
  if (now) ack(1);
}

void stream_record::finish(std::string frame, clock::time_point now, clock::duration window,
                           std::shared_ptr<void> hold) {
  std::lock_guard<std::mutex> lock(mu_);
  // A stream has one final frame: a second finish (a pipeline answering twice) is not sent.
  if (final_) return;
  if (sink_) sink_(frame, [hold = std::move(hold)] {});
  final_ = std::move(frame);
  expires_ = now + window;
  cancel_ = nullptr;
}

bool stream_record::resumable_with(std::string_view key) const {
  return !resume_key_.empty() && constant_time_equal(resume_key_, key);
}

bool stream_record::attached_to(const void* tag) const {
  std::lock_guard<std::mutex> lock(mu_);
  return tag != nullptr && tag_ == tag;
}

bool stream_record::attach(frame_sink sink, int64_t from_index, const void* tag, std::string displaced) {
  int32_t release = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!tokens_.empty() && tokens_.front().index > from_index + 1) return false;
    if (tokens_.empty() && final_ && from_index + 1 < 0) return false;
    // The connection that had it (still open: a client that came back on a new one before the
    // server noticed the old one drop) hears that the stream went elsewhere.
    if (sink_ && tag_ != tag && !final_ && !displaced.empty()) sink_(std::move(displaced), {});
    // Replayed frames were acknowledged already (written, or recorded while away).
    for (const auto& t : tokens_)
      if (t.index > from_index) sink(token_frame(id_, t.index, t.text, t.logprobs), {});
    if (final_) sink(*final_, {});
    release = handed_;  // another connection's unwritten frames: it lost them
    handed_ = 0;
    ++attach_gen_;
    sink_ = std::move(sink);
    tag_ = tag;
    from_index_ = from_index;  // a client that says it has more than was made gets only what is after it
    if (!final_) expires_.reset();
  }
  ack(release);
  return true;
}

void stream_record::detach(const void* tag, clock::time_point now, clock::duration window) {
  int32_t release = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tag_ != tag) return;
    sink_ = nullptr;
    tag_ = nullptr;
    release = handed_;
    handed_ = 0;
    ++attach_gen_;
    if (!final_) expires_ = now + window;
  }
  ack(release);
}

bool stream_record::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return final_.has_value();
}

bool stream_record::expired(clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  return expires_ && now >= *expires_;
}

std::shared_ptr<stream_record> resume_store::create(const std::string& owner, const std::string& id,
                                                    const std::string& resume_key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = records_[{owner, id}];
  if (slot && !slot->ended()) return nullptr;
  // An ended stream that its owner may still resume is not taken over by a generate that does
  // not hold its key (the owner would lose its final frame).
  if (slot && slot->resumable() && !slot->resumable_with(resume_key) && !slot->expired(stream_record::clock::now()))
    return nullptr;
  slot = std::make_shared<stream_record>(owner, id, keep_, resume_key);
  return slot;
}

std::shared_ptr<stream_record> resume_store::find(const std::string& owner, const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find({owner, id});
  return it == records_.end() ? nullptr : it->second;
}

size_t resume_store::sweep(stream_record::clock::time_point now) {
  std::vector<std::shared_ptr<stream_record>> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = records_.begin(); it != records_.end();) {
      if (it->second->expired(now)) {
        gone.push_back(it->second);
        it = records_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : gone)
    if (!r->ended()) r->cancel();
  return gone.size();
}

size_t resume_store::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

}  // namespace troupe::net
