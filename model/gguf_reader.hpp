#pragma once
// Reads GGUF v2/v3 files: memory-mapped, all metadata value types, the tensor table.
// Every malformed input becomes an error naming the problem (and the key or tensor).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "model/ggml_type.hpp"
#include "common/result.hpp"

namespace troupe::model {

enum class gguf_value_type : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};

struct gguf_value;
using gguf_array = std::vector<gguf_value>;

// One metadata value. Integers of every width are held as int64/uint64, floats as double;
// `type` keeps the type the file used.
struct gguf_value {
  gguf_value_type type = gguf_value_type::u8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<gguf_array>> v;
  gguf_value_type array_type = gguf_value_type::u8;  // element type when type == array

  bool is_integer() const;
  bool is_float() const { return type == gguf_value_type::f32 || type == gguf_value_type::f64; }
  int64_t as_int() const;     // integers and bools
  double as_double() const;   // integers and floats
  const std::string& as_string() const { return std::get<std::string>(v); }
  const gguf_array& as_array() const { return *std::get<std::shared_ptr<gguf_array>>(v); }
};

struct gguf_tensor {
  std::string name;
  ggml_type type = ggml_type::f32;
  std::vector<int64_t> dims;   // ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;         // from the start of the data section
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  int64_t elements() const;
  int64_t rows() const { return dims.empty() ? 0 : elements() / dims[0]; }
};

class gguf_file {
 public:
  static result<std::shared_ptr<gguf_file>> open(const std::string& path);
  // Parses an in-memory image (kept alive by the returned object); used by tests.
  static result<std::shared_ptr<gguf_file>> from_bytes(std::vector<uint8_t> bytes,
                                                       std::string name = "<memory>");
  ~gguf_file();
  gguf_file(const gguf_file&) = delete;
  gguf_file& operator=(const gguf_file&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }

  const std::map<std::string, gguf_value>& metadata() const { return kv_; }
  const gguf_value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Typed getters: an error names the key when it is missing or of the wrong type.
  result<std::string> get_string(const std::string& key) const;
  result<int64_t> get_int(const std::string& key) const;
  result<double> get_float(const std::string& key) const;
  result<bool> get_bool(const std::string& key) const;
  // Optional keys: absent gives `dflt`; present, of the wrong type, an error naming the key (a
  // string where a number belongs is a broken file, not a default).
  result<int64_t> get_int(const std::string& key, int64_t dflt) const;
  result<double> get_float(const std::string& key, double dflt) const;
  // Lenient: absent or of the wrong type gives `dflt`.
  std::string get_string_or(const std::string& key, std::string dflt) const;
  int64_t get_int_or(const std::string& key, int64_t dflt) const;
  result<std::vector<std::string>> get_string_array(const std::string& key) const;
  result<std::vector<double>> get_float_array(const std::string& key) const;
  result<std::vector<int64_t>> get_int_array(const std::string& key) const;

  // Says that the bytes [p, p + n) of the file will not be read for a while (a backend keeps its
  // own copy of them): their pages leave the process's resident memory and come back from the
  // file if read again. No effect on an in-memory image.
  void release_pages(const void* p, size_t n) const;

  const std::vector<gguf_tensor>& tensors() const { return tensors_; }
  const gguf_tensor* tensor(const std::string& name) const;

 private:
  gguf_file() = default;
  status parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;              // mmap'd region, when opened from a file
  std::unique_ptr<uint8_t, void (*)(void*)> owned_{nullptr, nullptr};  // 64-byte aligned copy, when parsed from memory
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::map<std::string, gguf_value> kv_;
  std::vector<gguf_tensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace troupe::model
