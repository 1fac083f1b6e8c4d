// Fuzzes config loading (config/config_loader.cpp parse_config): any text as a troupe.toml.
// Invariants: no crash; a refusal says what is wrong (naming the file); an accepted config
// written back with to_toml reads back to a config that writes the same TOML again (the
// round trip `troupe config show` and GET /admin/config rely on).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "config/config_loader.hpp"
#include "fuzz/fuzz_check.hpp"

using namespace troupe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto c = config::parse_config(text, "fuzz.toml");
  if (!c.ok()) {
    FUZZ_CHECK(!c.error().empty());
    return 0;
  }
  const std::string once = config::to_toml(c.value());
  const auto again = config::parse_config(once, "written.toml");
  if (!again.ok()) std::fprintf(stderr, "%s\n---\n%s\n", again.error().c_str(), once.c_str());
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(config::to_toml(again.value()) == once);
  return 0;
}
