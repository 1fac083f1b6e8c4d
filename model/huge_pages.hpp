#pragma once
// Memory backed by 2 MiB pages where the kernel allows it. A decode step streams ~100 MB of
// weights: in 4 KiB pages that is ~25,000 pages a step, far more than the TLB holds, so every page
// costs a page walk and the hardware prefetchers (which stop at 4 KiB boundaries) restart at
// each. Linux's transparent huge pages back only regions advised so (MADV_HUGEPAGE) in its
// default "madvise" mode; with "never" the memory is ordinary pages and everything still works.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace troupe::model {

inline constexpr size_t k_huge_page_bytes = size_t{2} << 20;

// `bytes` (rounded up to whole 2 MiB pages) aligned to 2 MiB and advised MADV_HUGEPAGE; null when
// the allocation fails. Freed with the last shared_ptr.
std::shared_ptr<uint8_t> alloc_huge_pages(size_t bytes);

// The bytes of [p, p + bytes) that 2 MiB pages back now (from /proc/self/smaps; 0 where it is
// unreadable): what `troupe bench` and `troupe info` report.
size_t huge_page_backed_bytes(const void* p, size_t bytes);

// The kernel's transparent huge page mode ("always", "madvise", "never"; "unknown" when
// /sys/kernel/mm/transparent_hugepage/enabled is unreadable).
std::string transparent_huge_pages_mode();

}  // namespace troupe::model
