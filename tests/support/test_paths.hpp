#pragma once
// Where tests find their fixtures and the real model file.
#include <string>

namespace troupe::test {
std::string fixture(const std::string& rel);
std::string real_model_path();
bool real_model_available();
}  // namespace troupe::test
