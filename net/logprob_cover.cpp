#include "net/logprob_cover.hpp"

namespace troupe::net {

std::vector<token_logprob_entry> logprob_cover::release(std::string_view text) {
  uncovered_ += text.size();
  std::vector<token_logprob_entry> out;
  while (!held_.empty() && held_.front().piece.size() <= uncovered_) {
    uncovered_ -= held_.front().piece.size();
    out.push_back(std::move(held_.front()));
    held_.pop_front();
  }
  return out;
}

std::vector<token_logprob_entry> logprob_cover::finish(std::string_view text) {
  auto out = release(text);
  if (uncovered_ > 0 && !held_.empty()) {
    held_.front().piece.resize(uncovered_);
    out.push_back(std::move(held_.front()));
  }
  held_.clear();
  uncovered_ = 0;
  return out;
}

}  // namespace troupe::net
