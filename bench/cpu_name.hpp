#pragma once
// The CPU's model name as /proc/cpuinfo gives it: every benchmark prints it with its figures
// (the machines change between runs).
#include <fstream>
#include <string>

namespace troupe::bench {

inline std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown CPU";
}

}  // namespace troupe::bench
