#pragma once
// The WebSocket resumption window. Every `generate` gets a stream record that keeps its last
// tokens (index and text: frames, which repeat the stream's id, are made as they are sent, so a
// record holds each token's text once), its final frame once it ends, and the
// connection it is attached to. A connection that goes away only detaches: the request keeps
// running and its tokens keep being recorded, so a client that reconnects within the window
// and sends `resume` with the last index it saw gets everything after it, then the live rest.
// Records expire `window` after their stream ended or lost its connection; a stream still
// running at expiry is cancelled (nobody will read it).
//
// Thread-safety: events arrive on pipeline threads, attach/detach on I/O threads; each record
// has its own mutex, and frames are handed to the attached sink while it is held, so a resumed
// client sees replayed and live frames in index order without gaps or duplicates.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace troupe::net {

// Cancels the stream's request; safe to call from any thread, more than once, after the end.
using cancel_fn = std::function<void()>;
// Acknowledges n token events of the stream's request (their frames were written out).
using ack_fn = std::function<void(int32_t n)>;

// Takes one encoded frame for a connection (posts it to that connection's strand); `written`
// (may be empty) is to be called once the frame is on the socket.
using frame_sink = std::function<void(std::string frame, std::function<void()> written)>;

// Flow control: a token frame counts as consumed (acknowledged to the pipeline) when the
// attached connection has written it; without a connection (the client is away, within the
// resumption window) it counts at once, since the record keeps it for a resume. A connection
// that goes away with frames unwritten acknowledges them as it detaches.
class stream_record : public std::enable_shared_from_this<stream_record> {
 public:
  using clock = std::chrono::steady_clock;
  // `resume_key`: the secret a `resume` must present (empty: the stream cannot be resumed).
  stream_record(std::string owner, std::string id, size_t keep_tokens, std::string resume_key = {}) :
      owner_(std::move(owner)), id_(std::move(id)), resume_key_(std::move(resume_key)), keep_(keep_tokens) {}

  const std::string& id() const { return id_; }
  const std::string& owner() const { return owner_; }
  // Whether `key` is this stream's resume key (compared in constant time); never for a stream
  // started without one.
  bool resumable_with(std::string_view key) const;
  // Whether it was started with a resume key (else nobody can ever resume it).
  bool resumable() const { return !resume_key_.empty(); }

  void set_cancel(cancel_fn c);
  void set_ack(ack_fn a);
  void cancel();

  // Records a token (forwarded to the attached sink as a token frame, net/ws_protocol.hpp) / the
  // final frame (forwarded as it is; only the first, a stream has one). `hold` (may be
  // empty) lives until the final frame is written or dropped by the attached connection, or
  // goes at once when none is attached (a drain waits on it).
  void add_token(int32_t index, std::string text, std::string logprobs = {});
  void finish(std::string frame, clock::time_point now, clock::duration window, std::shared_ptr<void> hold = {});

  // Attaches `sink` after replaying every frame with an index above `from_index`, and the final
  // frame if there is one. Another connection still attached is told with `displaced` (its
  // last frame for this stream) and loses it. Returns false (and attaches nothing) when tokens
  // after `from_index` were already dropped from the window. `tag` names the connection.
  bool attach(frame_sink sink, int64_t from_index, const void* tag, std::string displaced = {});
  // Whether the connection `tag` is the one attached.
  bool attached_to(const void* tag) const;
  // Detaches `tag`'s sink, if it is still the attached one; the window starts.
  void detach(const void* tag, clock::time_point now, clock::duration window);

  bool ended() const;
  // Past the window: to be removed (and cancelled if still running).
  bool expired(clock::time_point now) const;

 private:
  mutable std::mutex mu_;
  std::string owner_;
  std::string id_;
  std::string resume_key_;
  size_t keep_;
  struct kept_token {
    int32_t index;
    std::string text;
    std::string logprobs;  // the frame's logprob members, when the stream asked for them
  };
  std::deque<kept_token> tokens_;
  std::optional<std::string> final_;
  frame_sink sink_;
  const void* tag_ = nullptr;
  cancel_fn cancel_;
  ack_fn ack_;
  int32_t handed_ = 0;      // token frames given to the attached sink and not yet written
  int64_t from_index_ = -1; // the attached connection has every token up to this index
  uint64_t attach_gen_ = 0; // bumped by attach/detach: late `written` calls of an old sink are ignored
  int32_t early_acks_ = 0;  // acknowledged before set_ack (tokens can arrive first)
  void written(uint64_t gen);
  void ack(int32_t n);      // outside mu_
  std::optional<clock::time_point> expires_;
};

class resume_store {
 public:
  explicit resume_store(std::chrono::milliseconds window = std::chrono::seconds(60), size_t keep_tokens = 4096) :
      window_(window), keep_(keep_tokens) {}

  // A new record, or nullptr when (owner, id) names a stream that is still running, or one that
  // ended but may still be resumed with another resume_key than this one (within its window).
  std::shared_ptr<stream_record> create(const std::string& owner, const std::string& id,
                                        const std::string& resume_key = {});
  std::shared_ptr<stream_record> find(const std::string& owner, const std::string& id) const;
  // Removes expired records, cancelling those still running. Returns how many went.
  size_t sweep(stream_record::clock::time_point now = stream_record::clock::now());
  size_t size() const;
  std::chrono::milliseconds window() const { return window_; }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<stream_record>> records_;
  std::chrono::milliseconds window_;
  size_t keep_;
};

}  // namespace troupe::net
