// "stop_on": ends a stream when one of its phrases appears in the text, as a server-side stop
// string: the text before the phrase goes out, the phrase and what follows do not, and the
// stream ends with `finish_reason` (the scheduler frees the sequence at once). Text that could
// still become a phrase is held back until the next piece settles it. Options:
//   phrases         list of strings, required
//   finish_reason   string, default "filtered" (OpenAI clients know "content_filter")
//   case_sensitive  bool, default false (ASCII letters)
#include <algorithm>
#include <memory>

#include "actors/streamer/filters/text_match.hpp"
#include "actors/request.hpp"
#include "actors/streamer/filters/stream_filter.hpp"

namespace troupe::actors::filters {

namespace {

struct stop_on_options {
  std::vector<std::string> phrases;
  std::string finish_reason;
  bool case_sensitive = false;
};

class stop_on final : public stream_filter {
 public:
  explicit stop_on(std::shared_ptr<const stop_on_options> o) : o_(std::move(o)) {}

  filter_decision on_text(std::string& text) override {
    buf_ += text;
    text.clear();
    // Earliest phrase in what is held plus the new piece (earlier text held no whole phrase).
    size_t found = std::string::npos;
    for (const auto& p : o_->phrases)
      for (size_t i = 0; i + p.size() <= buf_.size() && i < found; ++i)
        if (same(buf_, i, p, p.size(), o_->case_sensitive)) found = std::min(found, i);
    if (found != std::string::npos) {
      text = buf_.substr(0, found);
      buf_.clear();
      return filter_decision::stop(o_->finish_reason);
    }
    // Keep the longest tail that begins some phrase.
    size_t keep = 0;
    for (const auto& p : o_->phrases)
      for (size_t n = std::min(p.size() - 1, buf_.size()); n > keep; --n)
        if (same(buf_, buf_.size() - n, p, n, o_->case_sensitive)) {
          keep = n;
          break;
        }
    text = buf_.substr(0, buf_.size() - keep);
    buf_.erase(0, buf_.size() - keep);
    return filter_decision::pass();
  }

  filter_decision on_end(std::string& text) override {
    text = std::move(buf_);  // no phrase can complete any more
    buf_.clear();
    return filter_decision::pass();
  }

 private:
  std::shared_ptr<const stop_on_options> o_;
  std::string buf_;
};

}  // namespace

void add_stop_on(named_registry<stream_filter_factory>& r) {
  r.add("stop_on", [](const option_map& options) -> result<filter_maker> {
    option_reader rd("stream filter 'stop_on'", options);
    auto o = std::make_shared<stop_on_options>();
    o->phrases = rd.strings("phrases");
    o->finish_reason = rd.string("finish_reason", finish::filtered);
    o->case_sensitive = rd.boolean("case_sensitive", false);
    if (o->phrases.empty()) rd.fail("phrases", "give at least one phrase");
    for (const auto& p : o->phrases)
      if (p.empty()) rd.fail("phrases", "a phrase must not be empty");
    if (o->finish_reason.empty()) rd.fail("finish_reason", "must not be empty");
    if (auto s = rd.finish(); !s) return make_error(s.error());
    std::shared_ptr<const stop_on_options> shared = std::move(o);
    return filter_maker([shared](const filter_context&) { return std::unique_ptr<stream_filter>(new stop_on(shared)); });
  });
}

}  // namespace troupe::actors::filters
