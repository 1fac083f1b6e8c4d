#pragma once
// The chat page served at GET /: one self-contained HTML document (net/web/index.html with
// chat.css and chat.js inlined), embedded at build time by net/web/chat_page.cmake. It speaks the
// WebSocket protocol of docs/protocol.md; no build step, nothing fetched from elsewhere.
#include <string_view>

namespace troupe::net {
std::string_view chat_page_html();
}
