#include "net/responses_store.hpp"

#include <iterator>
#include <utility>

namespace troupe::net {

size_t responses_store::bytes_of(const entry& e) {
  size_t n = e.response_json.size() + e.conversation.size();
  for (const auto& item : e.input_items) n += item.size();
  return n;
}

void responses_store::drop(lru_list::iterator it) {
  bytes_ -= bytes_of(it->second);
  by_id_.erase(it->first);
  order_.erase(it);
}

bool responses_store::put(const std::string& id, entry e) {
  const size_t n = bytes_of(e);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) drop(it->second);
  if (n > max_bytes_) return false;
  order_.emplace_front(id, std::move(e));
  by_id_[id] = order_.begin();
  bytes_ += n;
  while (order_.size() > capacity_ || bytes_ > max_bytes_) drop(std::prev(order_.end()));
  return true;
}

std::optional<responses_store::entry> responses_store::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->second;
}

bool responses_store::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  drop(it->second);
  return true;
}

size_t responses_store::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return order_.size();
}

size_t responses_store::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace troupe::net
