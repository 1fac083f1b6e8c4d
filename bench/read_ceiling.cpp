#include "bench/read_ceiling.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/huge_pages.hpp"

namespace troupe::bench {

namespace {
using v4d = double __attribute__((vector_size(32)));
}  // namespace

read_ceiling_probe::read_ceiling_probe(model::thread_pool& pool, size_t bytes) : pool_(pool), bytes_(bytes) {
  n_ = (bytes + 127) / 128 * 4;  // v4d elements, a multiple of 4
  // The same kind of memory as the packed weights (2 MiB pages where the kernel gives them,
  // model/huge_pages.hpp): the ceiling must not be read from slower pages than decode reads.
  mem_ = model::alloc_huge_pages(n_ * sizeof(v4d));
  auto* buf = reinterpret_cast<v4d*>(mem_.get());
  if (!buf) return;
  // Each thread touches its own slice first, so its pages are where that thread reads them.
  // Zeros: no denormal slow path in the sums.
  const size_t n = n_;
  pool_.run([&](int ith, int nth) {
    const size_t a = n / 4 * ith / nth * 4, b = n / 4 * (ith + 1) / nth * 4;
    std::memset(static_cast<void*>(buf + a), 0, (b - a) * sizeof(v4d));
  });
}


size_t read_ceiling_probe::huge_page_bytes() const { return model::huge_page_backed_bytes(mem_.get(), n_ * 32); }

read_ceiling read_ceiling_probe::measure(int passes) {
  if (!mem_) return {};
  const auto* buf = reinterpret_cast<const v4d*>(mem_.get());
  const size_t n = n_;
  std::vector<double> sink(static_cast<size_t>(pool_.size()));
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    // Each thread sums its slice with vector adds, four independent chains deep.
    pool_.run([&](int ith, int nth) {
      const size_t a = n / 4 * ith / nth * 4, b = n / 4 * (ith + 1) / nth * 4;
      v4d s0 = {}, s1 = {}, s2 = {}, s3 = {};
      for (size_t i = a; i < b; i += 4) {
        s0 += buf[i];
        s1 += buf[i + 1];
        s2 += buf[i + 2];
        s3 += buf[i + 3];
      }
      const v4d s = s0 + s1 + s2 + s3;
      sink[static_cast<size_t>(ith)] = s[0] + s[1] + s[2] + s[3];
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(v4d)) / secs / 1e9);
  }
  volatile double keep = sink[0];  // the sums are used: the reads stay
  (void)keep;
  return read_ceiling{best, bytes_, pool_.size()};
}

}  // namespace troupe::bench
