#pragma once
// Output filters: the streamer's last stage. A filter sees the text of a stream as the streamer
// releases it (after detokenizing and the request's stop strings), piece by piece, and may
// rewrite it, hold some back (a word that may continue in the next token), or end the stream
// with a finish reason of its own ("filtered", "stop", ...). Filters run in the configured
// order, each on what the one before let through.
//
// Registered by name (a duplicate name is an error; an unknown one lists the known ones). A
// filter's factory reads its options once into an immutable maker; the streamer calls the maker
// for each new stream, so per-stream state lives in the stream_filter it returns. Built in:
//   "redact"   replaces words of a list (whole words, any case by default) with a replacement
//   "stop_on"  ends the stream, finish reason "filtered", when one of its phrases appears
// Filters change while serving (pipeline::reconfigure): streams opened afterwards get the new
// chain; streams already running keep the filters they started with until they end.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "common/named_registry.hpp"
#include "common/options.hpp"
#include "common/result.hpp"

namespace troupe::actors {

// What a filter may know about the stream it is made for.
struct filter_context {
  uint64_t id = 0;            // the request's id
  std::string tenant;         // "default" when the request named none
  int32_t prompt_tokens = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, filter_context& x) {
  return f(caf::meta::type_name("filter_context"), x.id, x.tenant, x.prompt_tokens);
}

// What a filter answers for a piece of text.
struct filter_decision {
  bool end = false;           // end the stream after the text left in the piece
  std::string finish_reason;  // when end: the stream's finish reason
  static filter_decision pass() { return {}; }
  static filter_decision stop(std::string reason) { return {true, std::move(reason)}; }
};

class stream_filter {
 public:
  virtual ~stream_filter() = default;
  // The next piece of the stream's text (often one token's worth; may be empty). What is left in
  // `text` goes on now; a filter may keep part of it back and release it with a later piece.
  // After answering end, the filter is not called again.
  virtual filter_decision on_text(std::string& text) = 0;
  // The stream ends for another reason (max_tokens, a stop string or end-of-generation token, or
  // a filter before this one ended it): append what was held back to `text`. Answering end here
  // makes this filter's finish reason the stream's. Not called after a cancellation or a slow
  // consumer: held-back text is then dropped.
  virtual filter_decision on_end(std::string& /*text*/) { return filter_decision::pass(); }
};

// Makes a stream's filter; cheap, and called from the streamer actor's thread.
using filter_maker = std::function<std::unique_ptr<stream_filter>(const filter_context&)>;
// Reads and checks a filter's options once; its error names the filter and the option.
using stream_filter_factory = std::function<result<filter_maker>(const option_map& options)>;

// The process-wide registry, holding the built-in filters from its first use.
named_registry<stream_filter_factory>& stream_filter_registry();

// One configured filter (streamer_config::filters).
struct filter_spec {
  std::string name;
  option_map options;
  bool operator==(const filter_spec& o) const { return name == o.name && options == o.options; }
  bool operator!=(const filter_spec& o) const { return !(*this == o); }
};

// The configured filters, validated and ready to make a chain per stream. Immutable: shared by
// the streamer and its streams' makers.
class filter_chain_maker {
 public:
  // Looks up and runs each factory; the first error names the filter's place and name.
  static result<std::shared_ptr<const filter_chain_maker>> make(
      const std::vector<filter_spec>& specs,
      const named_registry<stream_filter_factory>& registry = stream_filter_registry());

  std::vector<std::unique_ptr<stream_filter>> make_chain(const filter_context& ctx) const;
  bool empty() const { return makers_.empty(); }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::vector<filter_maker> makers_;
  std::vector<std::string> names_;
};

// Runs `text` through `chain` in order. With `end_of_stream`, each filter is flushed after its
// piece (on_end), so held-back text comes out. When a filter ends the stream, the filters after
// it still see its text and are flushed; the ones before it are dropped with what they held.
// Answers the first end decision (or pass).
filter_decision run_filters(std::vector<std::unique_ptr<stream_filter>>& chain, std::string& text,
                            bool end_of_stream);

namespace filters {
// Defined in filters/*.cpp; called by stream_filter_registry().
void add_redact(named_registry<stream_filter_factory>& r);
void add_stop_on(named_registry<stream_filter_factory>& r);
}  // namespace filters

}  // namespace troupe::actors
