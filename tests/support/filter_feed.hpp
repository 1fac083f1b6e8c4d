#pragma once
// What the stream filter tests share (actors/streamer/filters: stream_filter_test,
// repeated_call_guard_test): feeding a filter text cut into pieces the way tokens cut it, and
// cutting text one byte at a time.
#include <string>
#include <vector>

#include "actors/streamer/filters/stream_filter.hpp"

namespace troupe::test {

struct run_result {
  std::string text;
  std::vector<std::string> outs;  // what each piece let out
  actors::filter_decision end;
};

// Feeds `pieces` one by one, then ends the stream (unless a piece ended it).
inline run_result feed(actors::stream_filter& f, const std::vector<std::string>& pieces) {
  run_result r;
  for (auto p : pieces) {
    auto d = f.on_text(p);
    r.text += p;
    r.outs.push_back(p);
    if (d.end) {
      r.end = d;
      return r;
    }
  }
  std::string held;
  r.end = f.on_end(held);
  r.text += held;
  return r;
}

inline std::vector<std::string> bytes_of(const std::string& s) {
  std::vector<std::string> v;
  for (char c : s) v.emplace_back(1, c);
  return v;
}

}  // namespace troupe::test
