#include "net/detail/prompt_cache_fields.hpp"

namespace troupe::net::detail {

namespace dom = simdjson::dom;

namespace {

// A string field that may only say what the server does anyway (`allowed`); another value is
// refused by name, `why` saying what it does.
void only_value(reader& r, std::string_view key, std::string_view allowed, const std::string& why) {
  std::string v;
  r.str(key, v);
  if (r.err || !r.get(key) || v == allowed) return;
  const std::string name = r.prefix + std::string(key);
  r.err = bad_request("'" + name + "' \"" + v + "\" is not supported by this server: " + why, name, "unsupported_field");
}

}  // namespace

void prompt_cache_fields(reader& r) {
  only_value(r, "prompt_cache_retention", "in_memory",
             "the prefix cache keeps what fits in memory (\"in_memory\"), without a retention to ask for");
  if (auto o = r.get("prompt_cache_options"); o && !r.err) {
    if (!o->is_object()) return r.wrong("prompt_cache_options", "an object", *o);
    reader or_{dom::object(*o), std::nullopt, r.prefix + "prompt_cache_options."};
    known_fields(or_, {"mode", "ttl"});
    only_value(or_, "mode", "implicit",
               "the prefix cache finds shared prefixes by itself (\"implicit\"); explicit breakpoints are not served");
    refuse(or_, "ttl", "the prefix cache keeps what fits in memory, with no lifetime to promise");
    if (or_.err) r.err = or_.err;
  }
  refuse(r, "moderation", "no moderation is run here");
}

void refuse_cache_breakpoint(reader& part) {
  refuse(part, "prompt_cache_breakpoint", "explicit prompt-cache breakpoints are not served (the prefix cache finds "
                                          "shared prefixes by itself)");
}

}  // namespace troupe::net::detail
