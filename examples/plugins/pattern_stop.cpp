// Shows: a stream filter built as a plugin: it ends a stream when a regular expression matches
// its text, before any of the matching text goes out. Tokens bring text a few bytes at a time,
// so the filter holds the last `window` bytes back: a match of up to that many bytes is seen
// whole before any of it is released. The text before the match goes out; the stream ends with
// `finish_reason`, and the scheduler drops the sequence at once.
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

#include "actors/plugin_api.hpp"
#include "actors/request.hpp"

namespace {

using namespace troupe;
using namespace troupe::actors;

struct pattern_options {
  std::regex re;
  size_t window = 64;
  std::string finish_reason;
};

class pattern_stop final : public stream_filter {
 public:
  explicit pattern_stop(std::shared_ptr<const pattern_options> o) : o_(std::move(o)) {}

  filter_decision on_text(std::string& text) override {
    held_ += text;
    std::smatch m;
    if (std::regex_search(held_, m, o_->re)) {
      text = held_.substr(0, static_cast<size_t>(m.position(0)));
      held_.clear();
      return filter_decision::stop(o_->finish_reason);
    }
    size_t cut = held_.size() > o_->window ? held_.size() - o_->window : 0;
    // Never split a UTF-8 character: back up to the start of the one the cut falls in.
    while (cut > 0 && (static_cast<unsigned char>(held_[cut]) & 0xC0) == 0x80) --cut;
    text = held_.substr(0, cut);
    held_.erase(0, cut);
    return filter_decision::pass();
  }

  filter_decision on_end(std::string& text) override {
    text = std::move(held_);  // searched already with every piece
    held_.clear();
    return filter_decision::pass();
  }

 private:
  std::shared_ptr<const pattern_options> o_;
  std::string held_;
};

result<filter_maker> make_pattern_stop(const option_map& options) {
  option_reader rd("stream filter 'pattern_stop'", options);
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
    return make_error("stream filter 'pattern_stop': option 'pattern': not a valid regular expression: " +
                      std::string(e.what()));
  }
  if (std::regex_search(std::string(), o->re))
    return make_error("stream filter 'pattern_stop': option 'pattern': it matches empty text, so it would end every stream at once");
  o->window = static_cast<size_t>(window);
  std::shared_ptr<const pattern_options> shared = std::move(o);
  return filter_maker([shared](const filter_context&) { return std::unique_ptr<stream_filter>(new pattern_stop(shared)); });
}

}  // namespace

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_stream_filter("pattern_stop", make_pattern_stop);
  return 0;
}
