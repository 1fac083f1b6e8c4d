#include "net/detail/prompt_cache_fields.hpp"

namespace troupe::net::detail {

namespace dom = simdjson::dom;

void prompt_cache_fields(reader& r) {
  std::string retention;
  r.str("prompt_cache_retention", retention);
  if (!r.err && r.get("prompt_cache_retention") && retention != "in_memory")
    r.err = bad_request("'" + r.prefix + "prompt_cache_retention' \"" + retention +
                            "\" is not supported by this server: the prefix cache keeps what fits in memory "
                            "(\"in_memory\"), without a retention to ask for",
                        r.prefix + "prompt_cache_retention", "unsupported_field");
  if (auto o = r.get("prompt_cache_options"); o && !r.err) {
    if (!o->is_object()) return r.wrong("prompt_cache_options", "an object", *o);
    reader or_{dom::object(*o), std::nullopt, r.prefix + "prompt_cache_options."};
    known_fields(or_, {"mode", "ttl"});
    std::string mode;
    or_.str("mode", mode);
    if (!or_.err && or_.get("mode") && mode != "implicit")
      or_.err = bad_request("'" + or_.prefix + "mode' \"" + mode +
                                "\" is not supported by this server: the prefix cache finds shared prefixes by "
                                "itself (\"implicit\"); explicit breakpoints are not served",
                            or_.prefix + "mode", "unsupported_field");
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
