#pragma once
// The Responses API's stored responses (`store`, on by default): what `previous_response_id`
// continues from and `GET` / `DELETE /v1/responses/{id}` read and remove. Kept in memory, at
// most `capacity` of them and `max_bytes` of text (a response holds its whole conversation, and a
// count alone would let long ones use any amount), the least recently used evicted first; a
// restart forgets them all (docs/protocol.md says so). Sessions run on several threads: every
// call takes the mutex.
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace troupe::net {

class responses_store {
 public:
  static constexpr size_t default_capacity = 1024;
  static constexpr size_t default_max_bytes = size_t{64} << 20;

  struct entry {
    std::string response_json;  // the response object, as it was answered
    std::string conversation;   // its input and output as chat messages (responses_request::conversation and the answer)
    std::vector<std::string> input_items;  // the input items it was made from (responses_request::input_items)
  };

  explicit responses_store(size_t capacity = default_capacity, size_t max_bytes = default_max_bytes) :
      capacity_(capacity == 0 ? 1 : capacity), max_bytes_(max_bytes) {}

  // Keeps `e` under `id` (replacing one with the same id), evicting the least recently used ones
  // over the bounds. One larger than max_bytes on its own is not kept (false): it would evict all
  // the others.
  bool put(const std::string& id, entry e);
  // The entry under `id`, now the most recently used; nullopt when not stored.
  std::optional<entry> get(const std::string& id);
  // Whether there was one to remove.
  bool erase(const std::string& id);
  size_t size() const;
  size_t bytes() const;  // the text held, all entries together
  size_t capacity() const { return capacity_; }

 private:
  using lru_list = std::list<std::pair<std::string, entry>>;  // most recently used first
  static size_t bytes_of(const entry& e);
  void drop(lru_list::iterator it);  // with mu_ held

  const size_t capacity_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  size_t bytes_ = 0;
  lru_list order_;
  std::unordered_map<std::string, lru_list::iterator> by_id_;
};

}  // namespace troupe::net
