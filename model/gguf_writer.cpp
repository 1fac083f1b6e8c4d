#include "model/gguf_writer.hpp"

#include <cstring>
#include <fstream>

#include "common/bytes.hpp"

namespace troupe::model {

namespace {

// GGUF writes string lengths and counts as 64 bits.
using sink = byte_writer<uint64_t, std::vector<uint8_t>>;

void put_value(sink& s, const gguf_value& v, bool with_type) {
  if (with_type) s.raw<uint32_t>(static_cast<uint32_t>(v.type));
  switch (v.type) {
    case gguf_value_type::u8: s.raw<uint8_t>(static_cast<uint8_t>(v.as_int())); break;
    case gguf_value_type::i8: s.raw<int8_t>(static_cast<int8_t>(v.as_int())); break;
    case gguf_value_type::u16: s.raw<uint16_t>(static_cast<uint16_t>(v.as_int())); break;
    case gguf_value_type::i16: s.raw<int16_t>(static_cast<int16_t>(v.as_int())); break;
    case gguf_value_type::u32: s.raw<uint32_t>(static_cast<uint32_t>(v.as_int())); break;
    case gguf_value_type::i32: s.raw<int32_t>(static_cast<int32_t>(v.as_int())); break;
    case gguf_value_type::u64: s.raw<uint64_t>(static_cast<uint64_t>(v.as_int())); break;
    case gguf_value_type::i64: s.raw<int64_t>(v.as_int()); break;
    case gguf_value_type::f32: s.raw<float>(static_cast<float>(v.as_double())); break;
    case gguf_value_type::f64: s.raw<double>(v.as_double()); break;
    case gguf_value_type::boolean: s.raw<uint8_t>(std::get<bool>(v.v) ? 1 : 0); break;
    case gguf_value_type::string: s.str(v.as_string()); break;
    case gguf_value_type::array: {
      s.raw<uint32_t>(static_cast<uint32_t>(v.array_type));
      s.raw<uint64_t>(v.as_array().size());
      for (const auto& e : v.as_array()) put_value(s, e, false);
      break;
    }
  }
}

gguf_value scalar(gguf_value_type t, uint64_t u) {
  gguf_value v;
  v.type = t;
  v.v = u;
  return v;
}

}  // namespace

void gguf_writer::set_value(const std::string& key, const gguf_value& v) {
  for (auto& kv : kv_)
    if (kv.first == key) { kv.second = v; return; }
  kv_.emplace_back(key, v);
}

void gguf_writer::set_u32(const std::string& key, uint32_t v) { set_value(key, scalar(gguf_value_type::u32, v)); }
void gguf_writer::set_u64(const std::string& key, uint64_t v) { set_value(key, scalar(gguf_value_type::u64, v)); }
void gguf_writer::set_i32(const std::string& key, int32_t v) {
  gguf_value x;
  x.type = gguf_value_type::i32;
  x.v = int64_t{v};
  set_value(key, x);
}
void gguf_writer::set_f32(const std::string& key, float v) {
  gguf_value x;
  x.type = gguf_value_type::f32;
  x.v = double{v};
  set_value(key, x);
}
void gguf_writer::set_bool(const std::string& key, bool v) {
  gguf_value x;
  x.type = gguf_value_type::boolean;
  x.v = v;
  set_value(key, x);
}
void gguf_writer::set_string(const std::string& key, const std::string& v) {
  gguf_value x;
  x.type = gguf_value_type::string;
  x.v = v;
  set_value(key, x);
}
void gguf_writer::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  auto arr = std::make_shared<gguf_array>();
  for (const auto& s : v) {
    gguf_value e;
    e.type = gguf_value_type::string;
    e.v = s;
    arr->push_back(std::move(e));
  }
  gguf_value x;
  x.type = gguf_value_type::array;
  x.array_type = gguf_value_type::string;
  x.v = arr;
  set_value(key, x);
}
void gguf_writer::set_f32_array(const std::string& key, const std::vector<float>& v) {
  auto arr = std::make_shared<gguf_array>();
  for (float f : v) {
    gguf_value e;
    e.type = gguf_value_type::f32;
    e.v = double{f};
    arr->push_back(std::move(e));
  }
  gguf_value x;
  x.type = gguf_value_type::array;
  x.array_type = gguf_value_type::f32;
  x.v = arr;
  set_value(key, x);
}
void gguf_writer::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  auto arr = std::make_shared<gguf_array>();
  for (int32_t i : v) {
    gguf_value e;
    e.type = gguf_value_type::i32;
    e.v = int64_t{i};
    arr->push_back(std::move(e));
  }
  gguf_value x;
  x.type = gguf_value_type::array;
  x.array_type = gguf_value_type::i32;
  x.v = arr;
  set_value(key, x);
}

void gguf_writer::add_tensor(const std::string& name, ggml_type type, std::vector<int64_t> dims,
                             std::vector<uint8_t> data) {
  tensors_.push_back({name, type, std::move(dims), std::move(data)});
}

void gguf_writer::set_alignment(uint32_t a) {
  alignment_ = a;
  set_u32("general.alignment", a);
}

std::vector<uint8_t> gguf_writer::to_bytes() const {
  sink s;
  s.raw<uint32_t>(0x46554747);
  s.raw<uint32_t>(3);
  s.raw<uint64_t>(tensors_.size());
  s.raw<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    s.str(k);
    put_value(s, v, true);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    s.str(t.name);
    s.raw<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (auto d : t.dims) s.raw<uint64_t>(static_cast<uint64_t>(d));
    s.raw<uint32_t>(static_cast<uint32_t>(t.type));
    s.raw<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  s.pad_to(alignment_);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    s.append(tensors_[i].data.data(), tensors_[i].data.size());
    if (i + 1 < tensors_.size()) s.pad_to(alignment_);  // no padding after the last tensor
  }
  return s.take();
}

status gguf_writer::write(const std::string& path) const {
  auto bytes = to_bytes();
  std::ofstream f(path, std::ios::binary);
  if (!f) return make_error("cannot write '" + path + "'");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) return make_error("short write to '" + path + "'");
  return {};
}

}  // namespace troupe::model
