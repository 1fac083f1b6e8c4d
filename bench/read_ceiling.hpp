#pragma once
// The ceiling of single-sequence decode: a decode step reads every weight once, so it cannot run
// faster than a streaming read of that many bytes on the same threads (the fastest of the read
// patterns tried: a ceiling must not be one loop's luck).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "model/thread_pool.hpp"

namespace troupe::bench {

struct read_ceiling {
  double gb_per_s = 0;
  size_t bytes = 0;
  int threads = 0;
  double tokens_per_s() const { return bytes ? gb_per_s * 1e9 / static_cast<double>(bytes) : 0.0; }
};

// A buffer of the weights' size, read by the pool's threads: the best of `passes` rounds of
// three read patterns (read_ceiling.cpp says why more than one).
class read_ceiling_probe {
 public:
  read_ceiling_probe(model::thread_pool& pool, size_t bytes);
  read_ceiling_probe(const read_ceiling_probe&) = delete;
  read_ceiling_probe& operator=(const read_ceiling_probe&) = delete;

  read_ceiling measure(int passes);
  // The buffer's bytes that 2 MiB pages back (as the packed weights', model/huge_pages.hpp).
  size_t huge_page_bytes() const;

 private:
  model::thread_pool& pool_;
  size_t bytes_;
  size_t n_ = 0;                  // 32-byte vectors in mem_
  std::shared_ptr<uint8_t> mem_;  // null when the allocation failed
};

}  // namespace troupe::bench
