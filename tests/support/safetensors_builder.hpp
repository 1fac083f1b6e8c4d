#pragma once
// Builds .safetensors images in memory for the cache tests.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/quant.hpp"

namespace troupe::test {

class safetensors_builder {
 public:
  void add_f32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    add_raw(name, "F32", std::move(shape), std::move(b));
  }
  void add_f16(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h = model::fp32_to_fp16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
    add_raw(name, "F16", std::move(shape), std::move(b));
  }
  void add_raw(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    std::string s = "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    s += "],\"data_offsets\":[" + std::to_string(data_.size()) + "," + std::to_string(data_.size() + bytes.size()) + "]}";
    entries_.push_back(s);
    data_.insert(data_.end(), bytes.begin(), bytes.end());
  }
  // The header JSON, padded with spaces to a multiple of 8 bytes as real files are.
  std::string header() const {
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
    for (const auto& e : entries_) h += "," + e;
    h += "}";
    while (h.size() % 8) h += ' ';
    return h;
  }
  std::vector<uint8_t> build() const { return with_header(header()); }
  std::vector<uint8_t> with_header(const std::string& h) const {
    const uint64_t n = h.size();
    std::vector<uint8_t> out(8 + h.size() + data_.size());
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
    std::memcpy(out.data() + 8, h.data(), h.size());
    if (!data_.empty()) std::memcpy(out.data() + 8 + h.size(), data_.data(), data_.size());
    return out;
  }

 private:
  std::vector<std::string> entries_;
  std::vector<uint8_t> data_;
};

}  // namespace troupe::test
