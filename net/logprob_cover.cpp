#include "net/logprob_cover.hpp"

#include <algorithm>

namespace troupe::net {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

}  // namespace

std::vector<token_logprob_entry> logprob_cover::release(std::string_view text) {
  released_ += text;
  std::vector<token_logprob_entry> out;
  while (!held_.empty() && starts_with(released_, held_.front().piece)) {
    released_.erase(0, held_.front().piece.size());
    out.push_back(std::move(held_.front()));
    held_.pop_front();
  }
  // What is left is part of the first held token's bytes (wait for the rest), or text that is
  // not the tokens' bytes: then everything held goes with it.
  if (!released_.empty() && (held_.empty() || !starts_with(held_.front().piece, released_))) {
    for (auto& e : held_) out.push_back(std::move(e));
    held_.clear();
    released_.clear();
  }
  return out;
}

std::vector<token_logprob_entry> logprob_cover::finish(std::string_view text) {
  auto out = release(text);
  if (!released_.empty()) {  // the text ends inside the first held token
    held_.front().piece = released_;
    out.push_back(std::move(held_.front()));
  }
  held_.clear();
  released_.clear();
  return out;
}

logprob_cover::aligned_piece logprob_cover::release_aligned(std::string_view text) {
  aligned_piece out;
  out.text = std::move(withheld_);
  out.text += text;
  out.entries = release(text);
  // released_ is now the start of the first held token's bytes, the end of the text so far
  // (withheld_ was released_ before this call): it waits for the rest of that token.
  const size_t wait = std::min(released_.size(), out.text.size());
  withheld_ = out.text.substr(out.text.size() - wait);
  out.text.resize(out.text.size() - wait);
  return out;
}

logprob_cover::aligned_piece logprob_cover::finish_aligned(std::string_view text) {
  aligned_piece out;
  out.text = std::move(withheld_);
  out.text += text;
  withheld_.clear();
  out.entries = finish(text);
  return out;
}

}  // namespace troupe::net
