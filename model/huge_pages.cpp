#include "model/huge_pages.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace troupe::model {

std::shared_ptr<uint8_t> alloc_huge_pages(size_t bytes) {
  const size_t size = (std::max<size_t>(bytes, 1) + k_huge_page_bytes - 1) / k_huge_page_bytes * k_huge_page_bytes;
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(k_huge_page_bytes, size));
  if (!mem) return nullptr;
#ifdef MADV_HUGEPAGE
  ::madvise(mem, size, MADV_HUGEPAGE);  // only advice: failing (no THP) leaves ordinary pages
#endif
  return std::shared_ptr<uint8_t>(mem, [](uint8_t* p) { std::free(p); });
}

size_t huge_page_backed_bytes(const void* p, size_t bytes) {
  // /proc/self/smaps lists each mapping ("start-end perms ...") and then its fields, among them
  // AnonHugePages; the ranges that overlap [p, p + bytes) are summed (a mapping may hold more
  // than this buffer, so the figure is capped at `bytes`).
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p), b = a + bytes;
  bool inside = false;
  size_t total = 0;
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo < b && hi > a;
      continue;
    }
    size_t kib = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %zu kB", &kib) == 1) total += kib * 1024;
  }
  return std::min(total, bytes);
}

std::string transparent_huge_pages_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return "unknown";
  // "always [madvise] never": the bracketed word is the mode.
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "unknown";
  return line.substr(open + 1, close - open - 1);
}

}  // namespace troupe::model
