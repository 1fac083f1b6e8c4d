#include "model/huge_pages.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace troupe::model;

// Whole 2 MiB pages, aligned to one, and ordinary memory for everything else.
TEST(HugePages, AllocatesAlignedWholePages) {
  auto p = alloc_huge_pages(5 * 1000 * 1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p.get()) % k_huge_page_bytes, 0u);
  std::memset(p.get(), 7, 3 * k_huge_page_bytes);  // all of the 3 pages 5 MB rounds up to
  EXPECT_EQ(p.get()[3 * k_huge_page_bytes - 1], 7);
  auto tiny = alloc_huge_pages(0);  // still a page: never a null for a valid request
  ASSERT_NE(tiny, nullptr);
}

// What huge_page_backed_bytes says is bounded by the range asked about, whatever the kernel.
TEST(HugePages, BackedBytesStayWithinTheRange) {
  auto p = alloc_huge_pages(4 * k_huge_page_bytes);
  ASSERT_NE(p, nullptr);
  std::memset(p.get(), 1, 4 * k_huge_page_bytes);
  const size_t backed = huge_page_backed_bytes(p.get(), 4 * k_huge_page_bytes);
  EXPECT_LE(backed, 4 * k_huge_page_bytes);
  EXPECT_LE(huge_page_backed_bytes(p.get(), 100), 100u);
  EXPECT_EQ(huge_page_backed_bytes(p.get(), 0), 0u);
  const std::string mode = transparent_huge_pages_mode();
  EXPECT_TRUE(mode == "always" || mode == "madvise" || mode == "never" || mode == "unknown") << mode;
  // With THP off nothing can be backed; where it is on, the kernel may still have had no free
  // 2 MiB page, so only the first direction is certain.
  if (mode == "never") EXPECT_EQ(backed, 0u);
  std::printf("transparent huge pages: %s; %zu of %zu bytes in 2 MiB pages\n", mode.c_str(), backed,
              4 * k_huge_page_bytes);
}
