#pragma once
// Flow control on a stream's unread backlog (server.max_unread_kib): a frame counts as consumed
// (its token acknowledged to the pipeline, actors::ack_mode::manual) only while the bytes the
// client has not read yet stay under the bound. Those bytes are the socket's send queue (unsent
// plus sent-but-unacknowledged, Linux ioctl SIOCOUTQ; for TLS the same TCP socket) plus the
// session's own queue of frames not yet handed to the socket. Without this the streamer pauses a
// sequence only once the socket blocks, after the kernel's send buffer (megabytes) has filled.
// Over the bound the acknowledgements wait and the backlog is looked at again every
// `recheck` until it drains; held long enough, the streamer pauses the sequence (its KV kept) and
// ends it as slow_consumer after streamer.slow_consumer_timeout_ms.
//
// Used on the session's strand only (one per connection: the backlog is the socket's).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <utility>

#if defined(__linux__)
#include <linux/sockios.h>  // SIOCOUTQ
#include <sys/ioctl.h>
#endif

namespace troupe::net::detail {

class unread_gate {
 public:
  static constexpr std::chrono::milliseconds recheck{20};

  // `fd`: the TCP socket; `limit_bytes` 0: no bound (acknowledgements pass at once); `queued`:
  // the session's own unsent bytes.
  template <class Executor>
  unread_gate(const Executor& ex, int fd, size_t limit_bytes, std::function<size_t()> queued) :
      timer_(ex), fd_(fd), limit_(limit_bytes), queued_(std::move(queued)) {}

  // The client's unread bytes as far as the server can tell; -1 when the socket cannot say (it
  // is closed: nothing is held for it any more).
  long long backlog() const {
    long long n = static_cast<long long>(queued_ ? queued_() : 0);
#if defined(__linux__)
    int out = 0;
    if (::ioctl(fd_, SIOCOUTQ, &out) != 0) return -1;
    n += out;
#endif
    return n;
  }

  // Runs `ack` now when the backlog is under the bound (and nothing is held before it), else
  // once it drains. `keep` (the session) stays alive while acknowledgements wait.
  void release(std::function<void()> ack, std::shared_ptr<void> keep) {
    if (!ack) return;
    if (limit_ == 0 || (held_.empty() && under())) return ack();
    held_.push_back(std::move(ack));
    arm(std::move(keep));
  }

  // The connection is gone: held acknowledgements are dropped (the stream's owner accounts for
  // them: stream_record::detach, or the request's cancel) and the timer stops.
  void stop() {
    held_.clear();
    ++gen_;  // a wait under way ends without touching what comes next (a keep-alive's next stream)
    armed_ = false;
    timer_.cancel();
  }

  size_t held() const { return held_.size(); }

 private:
  bool under() const {
    const long long b = backlog();
    return b < 0 || static_cast<unsigned long long>(b) < limit_;
  }

  void arm(std::shared_ptr<void> keep) {
    if (armed_) return;
    armed_ = true;
    timer_.expires_after(recheck);
    timer_.async_wait([this, gen = gen_, keep = std::move(keep)](const boost::system::error_code& ec) mutable {
      if (gen != gen_) return;
      armed_ = false;
      if (ec || held_.empty()) return;
      if (!under()) return arm(std::move(keep));
      // Released in order; an ack may queue more frames, so the list is taken first.
      auto go = std::move(held_);
      held_.clear();
      for (auto& a : go) a();
    });
  }

  boost::asio::steady_timer timer_;
  int fd_;
  size_t limit_;
  std::function<size_t()> queued_;
  std::deque<std::function<void()>> held_;
  bool armed_ = false;
  uint64_t gen_ = 0;
};

}  // namespace troupe::net::detail
