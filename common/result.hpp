#pragma once
// A value or an error message: errors are values inside the engine (see STYLE.md).
#include <optional>
#include <string>
#include <utility>

namespace troupe {

struct error_info {
  std::string message;
};

inline error_info make_error(std::string msg) { return error_info{std::move(msg)}; }

template <class T>
class result {
 public:
  result(T value) : value_(std::move(value)) {}                  // NOLINT: implicit by design
  result(error_info err) : error_(std::move(err.message)) {}     // NOLINT
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& value() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const std::string& error() const { return error_; }

 private:
  std::optional<T> value_;
  std::string error_;
};

// For operations that return nothing but may fail.
class status {
 public:
  status() = default;
  status(error_info err) : error_(std::move(err.message)), failed_(true) {}  // NOLINT
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
  bool failed_ = false;
};

}  // namespace troupe
