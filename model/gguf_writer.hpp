#pragma once
// Writes GGUF v3 images: used by tests and benchmarks to build synthetic models (tiny vocab,
// random weights of any tensor type) so that unit tests never need the real model file.
#include <cstdint>
#include <string>
#include <vector>

#include "model/ggml_type.hpp"
#include "model/gguf_reader.hpp"
#include "common/result.hpp"

namespace troupe::model {

class gguf_writer {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // A raw value (any type, arrays of any element type) for reader tests.
  void set_value(const std::string& key, const gguf_value& v);

  // `data` must hold exactly row_bytes(type, dims[0]) * rows bytes.
  void add_tensor(const std::string& name, ggml_type type, std::vector<int64_t> dims,
                  std::vector<uint8_t> data);

  void set_alignment(uint32_t a);
  std::vector<uint8_t> to_bytes() const;
  status write(const std::string& path) const;

 private:
  struct tensor_entry {
    std::string name;
    ggml_type type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, gguf_value>> kv_;
  std::vector<tensor_entry> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace troupe::model
