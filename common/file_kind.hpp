#pragma once
// What a path that is not a regular file is, in words, for the errors that refuse it: a model
// or config file must be one (a named pipe would block its reader, a directory reads as nothing).
#include <sys/stat.h>

namespace troupe {

inline const char* file_kind(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a named pipe";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a file";
}

}  // namespace troupe
