#pragma once
// Compiled constraints by spec, shared by admission (which compiles a request's constraint to
// refuse a bad one by name) and the executor (which matches against it): a schema is compiled
// once, not once per request. Bounded: the least recently used entries go first. Thread-safe.
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "structured/constraint.hpp"

namespace troupe::structured {

class constraint_cache {
 public:
  // `make_vocabulary` runs once, on the first compile (building it walks the whole vocabulary).
  explicit constraint_cache(std::function<std::shared_ptr<const token_vocabulary>()> make_vocabulary,
                            size_t capacity = 64);

  result<std::shared_ptr<const compiled_constraint>> get(const constraint_spec& spec);
  std::shared_ptr<const token_vocabulary> vocabulary();

 private:
  std::function<std::shared_ptr<const token_vocabulary>()> make_vocabulary_;
  size_t capacity_;
  std::once_flag vocab_once_;
  std::shared_ptr<const token_vocabulary> vocab_;
  std::mutex mu_;
  using entry = std::pair<std::string, std::shared_ptr<const compiled_constraint>>;
  std::list<entry> lru_;  // front: most recently used
  std::unordered_map<std::string, std::list<entry>::iterator> by_key_;
};

}  // namespace troupe::structured
