#pragma once
// Where the cache tests find the MiniLM files: $TROUPE_EMBEDDER_DIR, else models/all-MiniLM-L6-v2
// of the source tree (placed there by scripts/fetch-model.sh).
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace troupe::test {

inline std::string embedder_dir() {
  if (const char* e = std::getenv("TROUPE_EMBEDDER_DIR")) return e;
  return std::string(TROUPE_FIXTURES) + "/../../models/all-MiniLM-L6-v2";
}

inline bool embedder_available() {
  struct stat st {};
  return ::stat((embedder_dir() + "/model.safetensors").c_str(), &st) == 0;
}

#define TROUPE_REQUIRE_EMBEDDER()                                                              \
  do {                                                                                         \
    if (!::troupe::test::embedder_available())                                                 \
      GTEST_SKIP() << "no MiniLM files in " << ::troupe::test::embedder_dir()                  \
                   << " (run scripts/fetch-model.sh)";                                          \
  } while (0)

}  // namespace troupe::test
