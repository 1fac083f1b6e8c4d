#pragma once
// A text file a command reads whole (tokenize -f, eval -f, generate --json-schema/--grammar).
// A directory opens and then reads as nothing: it is refused by name, not read as "".
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/result.hpp"

namespace troupe::app {

inline result<std::string> read_file_text(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return make_error("'" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace troupe::app
