#include "app/version.hpp"
namespace troupe {
const char* version() { return "0.1.0"; }
}
