#include "net/chat_page.hpp"

namespace troupe::net {

std::string_view chat_page_html() {
  return R"HTML(<!doctype html>
<html><head><meta charset="utf-8"><title>Troupe chat</title></head>
<body><p>Troupe is running. The chat page is not built yet; use /v1/ws or /v1/chat/completions.</p></body></html>
)HTML";
}

}  // namespace troupe::net
