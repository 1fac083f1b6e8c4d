#pragma once
// Finds stop strings in streamed text. Text that could still be the start of a stop string is
// held back until the next piece decides it, so a stop string never leaks to the client.
#include <string>
#include <vector>

namespace troupe::model {

class stop_matcher {
 public:
  explicit stop_matcher(std::vector<std::string> stops = {});

  // Appends a piece and returns the text that is now safe to emit. After a stop string is
  // found, returns the text before it and stopped() turns true; later pushes return nothing.
  std::string push(const std::string& piece);
  // At the end of the stream: the held-back text (empty after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace troupe::model
