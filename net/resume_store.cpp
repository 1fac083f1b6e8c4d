#include "net/resume_store.hpp"

#include <vector>

namespace troupe::net {

void stream_record::set_cancel(cancel_fn c) {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_ = std::move(c);
}

void stream_record::cancel() {
  cancel_fn c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    c = cancel_;
  }
  if (c) c();
}

void stream_record::add_token(int32_t index, std::string frame) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sink_) sink_(frame);
  tokens_.emplace_back(index, std::move(frame));
  while (tokens_.size() > keep_) tokens_.pop_front();
}

void stream_record::finish(std::string frame, clock::time_point now, clock::duration window) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sink_) sink_(frame);
  final_ = std::move(frame);
  expires_ = now + window;
  cancel_ = nullptr;
}

bool stream_record::attach(frame_sink sink, int64_t from_index, const void* tag) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tokens_.empty() && tokens_.front().first > from_index + 1) return false;
  if (tokens_.empty() && final_ && from_index + 1 < 0) return false;
  for (const auto& [index, frame] : tokens_)
    if (index > from_index) sink(frame);
  if (final_) sink(*final_);
  sink_ = std::move(sink);
  tag_ = tag;
  if (!final_) expires_.reset();
  return true;
}

void stream_record::detach(const void* tag, clock::time_point now, clock::duration window) {
  std::lock_guard<std::mutex> lock(mu_);
  if (tag_ != tag) return;
  sink_ = nullptr;
  tag_ = nullptr;
  if (!final_) expires_ = now + window;
}

bool stream_record::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return final_.has_value();
}

bool stream_record::expired(clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  return expires_ && now >= *expires_;
}

std::shared_ptr<stream_record> resume_store::create(const std::string& owner, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = records_[{owner, id}];
  if (slot && !slot->ended()) return nullptr;
  slot = std::make_shared<stream_record>(owner, id, keep_);
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
