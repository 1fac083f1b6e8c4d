#pragma once
// The chat page served at GET /: static HTML + JS over the WebSocket protocol, no build step.
#include <string_view>

namespace troupe::net {
std::string_view chat_page_html();
}
