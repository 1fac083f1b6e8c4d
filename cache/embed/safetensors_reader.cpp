#include "cache/embed/safetensors_reader.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include <simdjson.h>

namespace troupe::cache {

namespace {

// A header beyond this is not a real model's (they are tens of KB); refusing it early keeps a
// corrupt length from turning into a huge allocation.
constexpr uint64_t k_max_header_bytes = 100u << 20;

size_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

}  // namespace

int64_t safetensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool safetensor::ggml_float_type(model::ggml_type& out) const {
  if (dtype == "F32") out = model::ggml_type::f32;
  else if (dtype == "F16") out = model::ggml_type::f16;
  else if (dtype == "BF16") out = model::ggml_type::bf16;
  else return false;
  return true;
}

result<std::shared_ptr<safetensors_file>> safetensors_file::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error("cannot stat " + path + ": " + std::strerror(e));
  }
  std::shared_ptr<safetensors_file> f(new safetensors_file());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      return make_error("cannot map " + path + ": " + std::strerror(e));
    }
    f->map_ = m;
    f->base_ = static_cast<const uint8_t*>(m);
    // The word-embedding table is read a row at a time (one per wordpiece): without this, each
    // first read of a row faults in up to 64 KiB around it, and resident memory creeps up with
    // every new word served (measured by bench/soak.py). The dense weights are read whole anyway.
    ::madvise(m, f->size_, MADV_RANDOM);
  }
  ::close(fd);
  if (auto s = f->parse(); !s) return make_error(path + ": " + s.error());
  return f;
}

result<std::shared_ptr<safetensors_file>> safetensors_file::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  std::shared_ptr<safetensors_file> f(new safetensors_file());
  f->path_ = std::move(name);
  f->owned_ = std::move(bytes);
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  if (auto s = f->parse(); !s) return make_error(f->path_ + ": " + s.error());
  return f;
}

safetensors_file::~safetensors_file() {
  if (map_) ::munmap(map_, size_);
}

const safetensor* safetensors_file::tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

status safetensors_file::parse() {
  if (size_ < 8) return make_error("truncated: " + std::to_string(size_) + " bytes, less than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base_[i];
  if (header_len > k_max_header_bytes) return make_error("header length " + std::to_string(header_len) + " is implausible (corrupt file?)");
  if (header_len > size_ - 8)
    return make_error("truncated: the header needs " + std::to_string(header_len) + " bytes, the file has " +
                      std::to_string(size_ - 8) + " after the length");
  const uint8_t* data = base_ + 8 + header_len;
  const size_t data_size = size_ - 8 - static_cast<size_t>(header_len);

  simdjson::dom::parser parser;
  simdjson::padded_string json(reinterpret_cast<const char*>(base_ + 8), static_cast<size_t>(header_len));
  simdjson::dom::element root;
  if (auto err = parser.parse(json).get(root)) return make_error(std::string("header is not valid JSON: ") + simdjson::error_message(err));
  simdjson::dom::object top;
  if (root.get(top)) return make_error("header is not a JSON object");

  for (auto field : top) {
    const std::string name(field.key);
    if (name == "__metadata__") {
      simdjson::dom::object meta;
      if (field.value.get(meta)) return make_error("__metadata__ is not an object");
      for (auto m : meta) {
        std::string_view v;
        if (m.value.get(v)) return make_error("__metadata__." + std::string(m.key) + " is not a string");
        metadata_[std::string(m.key)] = std::string(v);
      }
      continue;
    }
    auto where = "tensor '" + name + "': ";
    simdjson::dom::object t;
    if (field.value.get(t)) return make_error(where + "entry is not an object");
    safetensor st;
    st.name = name;
    std::string_view dtype;
    if (t["dtype"].get(dtype)) return make_error(where + "missing or non-string dtype");
    st.dtype = std::string(dtype);
    const size_t esize = dtype_size(st.dtype);
    if (esize == 0) return make_error(where + "unknown dtype " + st.dtype);
    simdjson::dom::array shape, offsets;
    if (t["shape"].get(shape)) return make_error(where + "missing or non-array shape");
    for (auto d : shape) {
      int64_t v;
      if (d.get(v) || v < 0) return make_error(where + "shape has a value that is not a non-negative integer");
      if (v > 0 && st.elements() > std::numeric_limits<int64_t>::max() / v) return make_error(where + "shape overflows");
      st.shape.push_back(v);
    }
    if (t["data_offsets"].get(offsets) || offsets.size() != 2) return make_error(where + "data_offsets is not a [begin, end] pair");
    uint64_t begin, end;
    if (offsets.at(0).get(begin) || offsets.at(1).get(end)) return make_error(where + "data_offsets are not non-negative integers");
    if (end < begin) return make_error(where + "data_offsets end before they begin");
    if (end > data_size)
      return make_error(where + "data [" + std::to_string(begin) + ", " + std::to_string(end) + ") runs past the " +
                        std::to_string(data_size) + " data bytes (truncated file?)");
    const uint64_t want = static_cast<uint64_t>(st.elements()) * esize;
    if (end - begin != want)
      return make_error(where + "has " + std::to_string(end - begin) + " bytes, its shape and dtype need " + std::to_string(want));
    st.data = data + begin;
    st.bytes = static_cast<size_t>(end - begin);
    if (index_.count(name)) return make_error(where + "appears twice");
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(st));
  }
  return {};
}

}  // namespace troupe::cache
