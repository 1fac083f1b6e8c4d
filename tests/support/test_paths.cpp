#include "tests/support/test_paths.hpp"

#include <sys/stat.h>

namespace troupe::test {

std::string fixture(const std::string& rel) { return std::string(TROUPE_FIXTURES) + "/" + rel; }

std::string real_model_path() { return TROUPE_MODEL_FILE; }

bool real_model_available() {
  struct stat st {};
  return ::stat(TROUPE_MODEL_FILE, &st) == 0;
}

}  // namespace troupe::test
