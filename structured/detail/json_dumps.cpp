#include "structured/detail/json_dumps.hpp"

#include <cstdio>

namespace troupe::structured::detail {

using simdjson::dom::element;
using simdjson::dom::element_type;

std::string json_dumps(element e) {
  switch (e.type()) {
    case element_type::OBJECT: {
      std::string out = "{";
      bool first = true;
      // A named handle: iterating the temporary result's value would dangle.
      const simdjson::dom::object fields = e.get_object().value_unsafe();
      for (auto field : fields) {
        if (!first) out += ", ";
        first = false;
        // json.dumps escapes a key as it escapes any string.
        std::string key = "\"";
        for (char c : field.key) {
          const auto u = static_cast<unsigned char>(c);
          if (c == '"' || c == '\\') {
            key += {'\\', c};
          } else if (u < 0x20) {
            char buf[8];
            const char* shorts = "btn\0fr";  // \b=8 \t=9 \n=10 \f=12 \r=13, as json.dumps writes them
            if (u >= 8 && u <= 13 && shorts[u - 8]) std::snprintf(buf, sizeof buf, "\\%c", shorts[u - 8]);
            else std::snprintf(buf, sizeof buf, "\\u%04x", u);
            key += buf;
          } else {
            key += c;
          }
        }
        out += key + "\": " + json_dumps(field.value);
      }
      return out + "}";
    }
    case element_type::ARRAY: {
      std::string out = "[";
      bool first = true;
      const simdjson::dom::array values = e.get_array().value_unsafe();
      for (auto v : values) {
        if (!first) out += ", ";
        first = false;
        out += json_dumps(v);
      }
      return out + "]";
    }
    default:
      return simdjson::minify(e);
  }
}

}  // namespace troupe::structured::detail
