#include "actors/streamer/filters/repeated_call_guard.hpp"

#include <algorithm>
#include <vector>

#include "actors/request.hpp"

namespace troupe::actors::filters {

namespace {

// What is between a call's markers, without the whitespace around it ("\n{...}\n" in hermes).
std::string body_of(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

class repeated_call_guard final : public stream_filter {
 public:
  repeated_call_guard(std::string open, std::string close) : open_(std::move(open)), close_(std::move(close)) {}

  filter_decision on_text(std::string& text) override {
    buf_ += text;
    text.clear();
    for (;;) {
      if (!inside_) {
        const size_t at = buf_.find(open_);
        if (at == std::string::npos) {
          // Out, but for a tail that may begin the opening marker.
          const size_t keep = marker_tail(buf_, open_);
          text += buf_.substr(0, buf_.size() - keep);
          buf_.erase(0, buf_.size() - keep);
          return filter_decision::pass();
        }
        text += buf_.substr(0, at);
        buf_.erase(0, at + open_.size());
        inside_ = true;
        body_.clear();
        if (bodies_.empty()) text += open_;  // the first call streams as it is written
        else held_ = open_;
        continue;
      }
      const size_t at = buf_.find(close_);
      const bool first = bodies_.empty();
      if (at == std::string::npos) {
        // Inside, not closed yet: the first call's text goes on (but for a possible closing
        // marker's start, so that the body is known whole when it closes); a later one waits.
        const size_t keep = marker_tail(buf_, close_);
        const std::string part = buf_.substr(0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        body_ += part;
        if (first) text += part;
        else held_ += part;
        return filter_decision::pass();
      }
      const std::string part = buf_.substr(0, at);
      buf_.erase(0, at + close_.size());
      body_ += part;
      inside_ = false;
      const std::string body = body_of(body_);
      if (!first && std::find(bodies_.begin(), bodies_.end(), body) != bodies_.end()) {
        held_.clear();  // the repeat, and whatever came after it, never goes out
        buf_.clear();
        return filter_decision::stop(finish::stop);
      }
      bodies_.push_back(body);
      if (first) text += part + close_;
      else text += held_ + part + close_;
      held_.clear();
    }
  }

  filter_decision on_end(std::string& text) override {
    text = held_ + buf_;  // a call cut short goes out as it was cut
    held_.clear();
    buf_.clear();
    return filter_decision::pass();
  }

 private:
  // The length of the longest tail of `s` that is a proper prefix of `marker`.
  static size_t marker_tail(const std::string& s, const std::string& marker) {
    for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
      if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
    return 0;
  }

  const std::string open_, close_;
  std::string buf_;                  // not yet decided
  std::string held_;                 // a later call's text, until it closes
  std::string body_;                 // the current call's text between its markers
  bool inside_ = false;
  std::vector<std::string> bodies_;  // the calls made so far
};

}  // namespace

std::unique_ptr<stream_filter> make_repeated_call_guard(std::string open_marker, std::string close_marker) {
  return std::make_unique<repeated_call_guard>(std::move(open_marker), std::move(close_marker));
}

}  // namespace troupe::actors::filters
