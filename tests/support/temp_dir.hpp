#pragma once
// A fresh directory under the system temp folder, removed with everything in it at scope exit.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

namespace troupe::test {

class temp_dir {
 public:
  explicit temp_dir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("troupe-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::string str(const std::string& sub = "") const { return sub.empty() ? path_.string() : (path_ / sub).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace troupe::test
