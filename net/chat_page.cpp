#include "net/chat_page.hpp"

#include <cstddef>

namespace troupe::net {

namespace detail {
// Defined in the generated chat_page_data.cpp (net/web/embed.cmake).
extern const unsigned char chat_page_bytes[];
extern const std::size_t chat_page_size;
}  // namespace detail

std::string_view chat_page_html() {
  return {reinterpret_cast<const char*>(detail::chat_page_bytes), detail::chat_page_size};
}

}  // namespace troupe::net
