// "redact": replaces each word of a list with a replacement as the text streams out. A word may
// arrive split over several tokens, so text that could still become a listed word is held back
// until the next piece settles it (with whole_words, also the byte after a word, which must not
// continue it). Options:
//   words           list of strings, required: what to redact
//   replacement     string, default "[redacted]" ("" deletes)
//   case_sensitive  bool, default false (ASCII letters)
//   whole_words     bool, default true: "pass" is not redacted inside "passage"
#include <algorithm>
#include <memory>

#include "actors/streamer/filters/text_match.hpp"
#include "actors/streamer/filters/stream_filter.hpp"

namespace troupe::actors::filters {

namespace {

struct redact_options {
  std::vector<std::string> words;
  std::string replacement;
  bool case_sensitive = false;
  bool whole_words = true;
};

class redact final : public stream_filter {
 public:
  explicit redact(std::shared_ptr<const redact_options> o) : o_(std::move(o)) {}

  filter_decision on_text(std::string& text) override {
    buf_ += text;
    text = scan(false);
    return filter_decision::pass();
  }

  filter_decision on_end(std::string& text) override {
    text = scan(true);
    return filter_decision::pass();
  }

 private:
  // Releases what is settled; keeps from the first place where a listed word may still begin.
  std::string scan(bool at_end) {
    std::string out;
    size_t i = 0;
    while (i < buf_.size()) {
      size_t match = 0;
      bool undecided = false;
      if (!o_->whole_words || !prev_word_) {
        for (const auto& w : o_->words) {
          const size_t n = std::min(w.size(), buf_.size() - i);
          if (!same(buf_, i, w, n, o_->case_sensitive)) continue;
          if (n < w.size()) {
            undecided = undecided || !at_end;  // the rest of the word may come
            continue;
          }
          const size_t after = i + w.size();
          if (o_->whole_words) {
            if (after == buf_.size() && !at_end) {
              undecided = true;  // the next byte decides whether it is the whole word
              continue;
            }
            if (after < buf_.size() && word_byte(buf_[after])) continue;
          }
          match = std::max(match, w.size());
        }
      }
      if (undecided) break;
      if (match > 0) {
        out += o_->replacement;
        prev_word_ = word_byte(buf_[i + match - 1]);
        i += match;
      } else {
        prev_word_ = word_byte(buf_[i]);
        out += buf_[i++];
      }
    }
    buf_.erase(0, i);
    return out;
  }

  std::shared_ptr<const redact_options> o_;
  std::string buf_;         // held back
  bool prev_word_ = false;  // the byte before buf_ belongs to a word
};

}  // namespace

void add_redact(named_registry<stream_filter_factory>& r) {
  r.add("redact", [](const option_map& options) -> result<filter_maker> {
    option_reader rd("stream filter 'redact'", options);
    auto o = std::make_shared<redact_options>();
    o->words = rd.strings("words");
    o->replacement = rd.string("replacement", "[redacted]");
    o->case_sensitive = rd.boolean("case_sensitive", false);
    o->whole_words = rd.boolean("whole_words", true);
    if (o->words.empty()) rd.fail("words", "give at least one word to redact");
    for (const auto& w : o->words)
      if (w.empty()) rd.fail("words", "a word must not be empty");
    if (auto s = rd.finish(); !s) return make_error(s.error());
    std::shared_ptr<const redact_options> shared = std::move(o);
    return filter_maker([shared](const filter_context&) { return std::unique_ptr<stream_filter>(new redact(shared)); });
  });
}

}  // namespace troupe::actors::filters
