#pragma once
// Reads Hugging Face .safetensors files: an 8-byte little-endian header length, a JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
// tensor bytes. The file is memory-mapped; every malformed input (truncated file, bad JSON,
// offsets outside the data, a size that does not match the shape) becomes an error that names
// the problem and the tensor.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/ggml_type.hpp"
#include "common/result.hpp"

namespace troupe::cache {

struct safetensor {
  std::string name;
  std::string dtype;            // as written: "F32", "F16", "BF16", "I64", ...
  std::vector<int64_t> shape;   // outermost first (row-major): a Linear weight is [out, in]
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  int64_t elements() const;
  // The matching ggml type for float dtypes that the engine's kernels take; false otherwise.
  bool ggml_float_type(model::ggml_type& out) const;
};

class safetensors_file {
 public:
  static result<std::shared_ptr<safetensors_file>> open(const std::string& path);
  // Parses an in-memory image (kept alive by the returned object); used by tests.
  static result<std::shared_ptr<safetensors_file>> from_bytes(std::vector<uint8_t> bytes,
                                                              std::string name = "<memory>");
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<safetensor>& tensors() const { return tensors_; }
  const safetensor* tensor(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  safetensors_file() = default;
  status parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;
  std::vector<uint8_t> owned_;
  std::vector<safetensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace troupe::cache
