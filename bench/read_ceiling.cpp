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

namespace {

// The ways of reading the buffer, each the sum of every double in a thread's share with four
// independent chains (the sums are kept: the reads stay). One pattern is not the hardware's best
// on every machine and every hour: on the shared AMD EPYC hosts seen so far the plain read of two
// halves measured anywhere from 28 to 50 GB/s while decode itself streamed its weights at 32, so
// the ceiling is the best of three patterns (two halves; 1 MiB slices taken in turn, as the
// kernels' row chunks are; 512-bit loads with software prefetch where the CPU has AVX-512).
enum class pattern { halves, slices, wide_prefetched };

double sum_plain(const v4d* p, size_t n, size_t prefetch_bytes) {
  v4d s0 = {}, s1 = {}, s2 = {}, s3 = {};
  for (size_t i = 0; i < n; i += 4) {
    if (prefetch_bytes) __builtin_prefetch(reinterpret_cast<const char*>(p + i) + prefetch_bytes);
    if (prefetch_bytes) __builtin_prefetch(reinterpret_cast<const char*>(p + i) + prefetch_bytes + 64);
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  const v4d s = s0 + s1 + s2 + s3;
  return s[0] + s[1] + s[2] + s[3];
}

__attribute__((target("avx512f"))) double sum_wide(const v4d* p, size_t n) {
  using v8d = double __attribute__((vector_size(64)));
  const auto* w = reinterpret_cast<const v8d*>(p);
  const size_t m = n / 2;  // 64-byte vectors; n is a multiple of 4
  v8d s0 = {}, s1 = {}, s2 = {}, s3 = {};
  for (size_t i = 0; i + 4 <= m; i += 4) {
    for (int o = 0; o < 256; o += 64) __builtin_prefetch(reinterpret_cast<const char*>(w + i) + 4096 + o);
    s0 += w[i];
    s1 += w[i + 1];
    s2 += w[i + 2];
    s3 += w[i + 3];
  }
  const v8d s = s0 + s1 + s2 + s3;
  double t = 0;
  for (int i = 0; i < 8; ++i) t += s[i];
  return t;
}

}  // namespace

read_ceiling read_ceiling_probe::measure(int passes) {
  if (!mem_) return {};
  const auto* buf = reinterpret_cast<const v4d*>(mem_.get());
  const size_t n = n_;
  std::vector<double> sink(static_cast<size_t>(pool_.size()));
  static const bool wide = __builtin_cpu_supports("avx512f");
  std::vector<pattern> patterns = {pattern::halves, pattern::slices};
  if (wide) patterns.push_back(pattern::wide_prefetched);
  constexpr size_t slice = (size_t{1} << 20) / sizeof(v4d);  // vectors in 1 MiB
  double best = 0;
  for (int pass = 0; pass < passes; ++pass)
    for (const pattern pt : patterns) {
      const auto t0 = std::chrono::steady_clock::now();
      pool_.run([&](int ith, int nth) {
        double total = 0;
        if (pt == pattern::slices) {
          for (size_t a = slice * static_cast<size_t>(ith); a < n; a += slice * static_cast<size_t>(nth))
            total += sum_plain(buf + a, std::min(n, a + slice) - a, 1024);
        } else {
          const size_t a = n / 4 * ith / nth * 4, b = n / 4 * (ith + 1) / nth * 4;
          total = pt == pattern::halves ? sum_plain(buf + a, b - a, 0) : sum_wide(buf + a, b - a);
        }
        sink[static_cast<size_t>(ith)] += total;
      });
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, static_cast<double>(n * sizeof(v4d)) / secs / 1e9);
    }
  volatile double keep = sink[0];  // the sums are used: the reads stay
  (void)keep;
  return read_ceiling{best, bytes_, pool_.size()};
}

}  // namespace troupe::bench
