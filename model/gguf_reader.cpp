#include "model/gguf_reader.hpp"

#include "common/file_kind.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace troupe::model {

namespace {

constexpr uint32_t k_magic = 0x46554747;  // "GGUF" little-endian
// Sanity caps: a corrupt count must not make us allocate the world.
constexpr uint64_t k_max_string = 1ull << 30;
constexpr uint64_t k_max_count = 1ull << 28;
// All metadata arrays' elements together. Each is read into a gguf_value (~50 bytes, against a
// byte or a few in the file): a 40 MB array of u8 took 2.4 GB before this. The largest real
// tokenizers hold ~1.5 million (256K tokens, their scores and types, the merges).
constexpr uint64_t k_max_elements = 1ull << 22;
constexpr int k_max_depth = 4;

class cursor {
 public:
  cursor(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t pos() const { return pos_; }
  bool need(size_t k) const { return k <= n_ - pos_; }
  size_t left() const { return n_ - pos_; }
  uint64_t elements = 0;  // metadata array elements read so far (k_max_elements)

  template <class T>
  bool read(T& out) {
    if (!need(sizeof(T))) return false;
    std::memcpy(&out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool read_string(std::string& out) {
    uint64_t len = 0;
    if (!read(len) || len > k_max_string || !need(len)) return false;
    out.assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return true;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

const char* value_type_name(gguf_value_type t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "invalid";
}

bool read_value(cursor& c, gguf_value_type t, gguf_value& out, int depth, std::string& why) {
  out.type = t;
  switch (t) {
    case gguf_value_type::u8: { uint8_t x; if (!c.read(x)) break; out.v = uint64_t{x}; return true; }
    case gguf_value_type::i8: { int8_t x; if (!c.read(x)) break; out.v = int64_t{x}; return true; }
    case gguf_value_type::u16: { uint16_t x; if (!c.read(x)) break; out.v = uint64_t{x}; return true; }
    case gguf_value_type::i16: { int16_t x; if (!c.read(x)) break; out.v = int64_t{x}; return true; }
    case gguf_value_type::u32: { uint32_t x; if (!c.read(x)) break; out.v = uint64_t{x}; return true; }
    case gguf_value_type::i32: { int32_t x; if (!c.read(x)) break; out.v = int64_t{x}; return true; }
    case gguf_value_type::u64: { uint64_t x; if (!c.read(x)) break; out.v = x; return true; }
    case gguf_value_type::i64: { int64_t x; if (!c.read(x)) break; out.v = x; return true; }
    case gguf_value_type::f32: { float x; if (!c.read(x)) break; out.v = double{x}; return true; }
    case gguf_value_type::f64: { double x; if (!c.read(x)) break; out.v = x; return true; }
    case gguf_value_type::boolean: {
      uint8_t x;
      if (!c.read(x)) break;
      out.v = x != 0;
      return true;
    }
    case gguf_value_type::string: {
      std::string s;
      if (!c.read_string(s)) break;
      out.v = std::move(s);
      return true;
    }
    case gguf_value_type::array: {
      if (depth >= k_max_depth) { why = "arrays nested too deeply"; return false; }
      uint32_t et = 0;
      uint64_t n = 0;
      if (!c.read(et) || !c.read(n)) break;
      if (et > 12) { why = "array of invalid value type " + std::to_string(et); return false; }
      if (n > k_max_count) { why = "array length " + std::to_string(n) + " is implausible"; return false; }
      // Every element takes at least a byte: a length past the file's end is refused before
      // reserve() trusts it (a 30-byte file could otherwise ask for gigabytes).
      if (n > c.left()) { why = "array length " + std::to_string(n) + " runs past the end of the file"; return false; }
      c.elements += n;
      if (c.elements > k_max_elements) {
        why = "metadata arrays hold more than " + std::to_string(k_max_elements) + " elements in all (implausible)";
        return false;
      }
      auto arr = std::make_shared<gguf_array>();
      arr->reserve(n);
      out.array_type = static_cast<gguf_value_type>(et);
      for (uint64_t i = 0; i < n; ++i) {
        gguf_value e;
        if (!read_value(c, out.array_type, e, depth + 1, why)) return false;
        arr->push_back(std::move(e));
      }
      out.v = std::move(arr);
      return true;
    }
    default:
      why = "invalid value type " + std::to_string(static_cast<uint32_t>(t));
      return false;
  }
  why = "file ends inside a " + std::string(value_type_name(t)) + " value";
  return false;
}

}  // namespace

bool gguf_value::is_integer() const {
  switch (type) {
    case gguf_value_type::u8: case gguf_value_type::i8: case gguf_value_type::u16:
    case gguf_value_type::i16: case gguf_value_type::u32: case gguf_value_type::i32:
    case gguf_value_type::u64: case gguf_value_type::i64:
      return true;
    default:
      return false;
  }
}

int64_t gguf_value::as_int() const {
  if (auto* u = std::get_if<uint64_t>(&v)) return static_cast<int64_t>(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  if (auto* d = std::get_if<double>(&v)) return static_cast<int64_t>(*d);
  return 0;
}

double gguf_value::as_double() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  return static_cast<double>(as_int());
}

int64_t gguf_tensor::elements() const {
  int64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

void gguf_file::release_pages(const void* p, size_t n) const {
  if (!map_) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + n;
  const auto base = reinterpret_cast<uintptr_t>(base_);
  if (lo < base || hi > base + size_) return;
  const uintptr_t a = (lo + page - 1) / page * page, b = hi / page * page;  // whole pages inside only
  if (a < b) ::madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

result<std::shared_ptr<gguf_file>> gguf_file::open(const std::string& path) {
  // O_NONBLOCK: a blocking open of a FIFO waits for a writer forever, before fstat could refuse it.
  // It changes nothing for the mmap of a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return make_error("cannot open model file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error("cannot stat model file '" + path + "': " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("model file '" + path + "' is not a regular file (" + file_kind(st.st_mode) + ")");
  }
  std::shared_ptr<gguf_file> f(new gguf_file());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      ::close(fd);
      return make_error("cannot map '" + path + "': " + std::strerror(errno));
    }
    f->map_ = m;
    f->base_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);
  if (auto s = f->parse(); !s) return make_error("'" + path + "': " + s.error());
  return f;
}

result<std::shared_ptr<gguf_file>> gguf_file::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  std::shared_ptr<gguf_file> f(new gguf_file());
  f->path_ = std::move(name);
  // Copied into a 64-byte aligned buffer so that tensor data is as aligned as in a mapped file.
  const size_t cap = (bytes.size() + 63) / 64 * 64 + 64;
  f->owned_ = std::unique_ptr<uint8_t, void (*)(void*)>(static_cast<uint8_t*>(std::aligned_alloc(64, cap)), std::free);
  if (!f->owned_) return make_error("out of memory reading '" + f->path_ + "'");
  if (!bytes.empty()) std::memcpy(f->owned_.get(), bytes.data(), bytes.size());
  f->base_ = f->owned_.get();
  f->size_ = bytes.size();
  if (auto s = f->parse(); !s) return make_error("'" + f->path_ + "': " + s.error());
  return f;
}

gguf_file::~gguf_file() {
  if (map_) ::munmap(map_, size_);
}

status gguf_file::parse() {
  cursor c(base_, size_);
  uint32_t magic = 0;
  if (!c.read(magic)) return make_error("file is empty or too short to be GGUF");
  if (magic != k_magic) return make_error("not a GGUF file (bad magic)");
  if (!c.read(version_)) return make_error("file ends inside the header");
  if (version_ != 2 && version_ != 3)
    return make_error("unsupported GGUF version " + std::to_string(version_) + " (2 and 3 are supported)");
  uint64_t n_tensors = 0, n_kv = 0;
  if (!c.read(n_tensors) || !c.read(n_kv)) return make_error("file ends inside the header");
  if (n_tensors > k_max_count || n_kv > k_max_count) return make_error("implausible tensor or key count in header");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    if (!c.read_string(key)) return make_error("file ends inside metadata key #" + std::to_string(i));
    uint32_t t = 0;
    if (!c.read(t)) return make_error("file ends inside metadata key '" + key + "'");
    gguf_value v;
    std::string why;
    if (t > 12) return make_error("metadata key '" + key + "' has invalid value type " + std::to_string(t));
    if (!read_value(c, static_cast<gguf_value_type>(t), v, 0, why))
      return make_error("metadata key '" + key + "': " + why);
    kv_[key] = std::move(v);
  }
  if (auto* a = find("general.alignment")) {
    if (!a->is_integer() || a->as_int() <= 0 || (a->as_int() & (a->as_int() - 1)) != 0)
      return make_error("general.alignment must be a positive power of two");
    alignment_ = static_cast<size_t>(a->as_int());
  }

  // Each tensor's info takes at least 32 bytes (name length, one dimension, type, offset): a count
  // the rest of the file cannot hold is refused before reserve() trusts it.
  if (n_tensors > c.left() / 32)
    return make_error("header says " + std::to_string(n_tensors) + " tensors, more than the " +
                      std::to_string(c.left()) + " bytes left can describe");
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    gguf_tensor t;
    if (!c.read_string(t.name)) return make_error("file ends inside tensor info #" + std::to_string(i));
    uint32_t nd = 0;
    if (!c.read(nd)) return make_error("file ends inside tensor info '" + t.name + "'");
    if (nd == 0 || nd > 4) return make_error("tensor '" + t.name + "' has " + std::to_string(nd) + " dimensions (1-4 allowed)");
    for (uint32_t d = 0; d < nd; ++d) {
      uint64_t ne = 0;
      if (!c.read(ne)) return make_error("file ends inside tensor info '" + t.name + "'");
      if (ne == 0 || ne > (1ull << 40)) return make_error("tensor '" + t.name + "' has invalid dimension " + std::to_string(ne));
      t.dims.push_back(static_cast<int64_t>(ne));
      // The element count must stay far from overflow before elements() multiplies the dims:
      // checked before each product (two dims of 2^40 would wrap a uint64 to 0 and pass).
      uint64_t count = 1;
      for (auto dim : t.dims) {
        if (count > (1ull << 40) / static_cast<uint64_t>(dim))
          return make_error("tensor '" + t.name + "' is implausibly large");
        count *= static_cast<uint64_t>(dim);
      }
    }
    uint32_t type = 0;
    if (!c.read(type) || !c.read(t.offset)) return make_error("file ends inside tensor info '" + t.name + "'");
    const auto* tr = traits_of(type);
    if (!tr) return make_error("tensor '" + t.name + "' has unknown type id " + std::to_string(type));
    if (!tr->supported) return make_error("tensor '" + t.name + "' has type " + tr->name + ", which Troupe does not support");
    t.type = static_cast<ggml_type>(type);
    if (t.dims[0] % tr->block_size != 0)
      return make_error("tensor '" + t.name + "' row length " + std::to_string(t.dims[0]) +
                        " is not a multiple of the " + tr->name + " block size");
    if (t.elements() > (int64_t{1} << 40)) return make_error("tensor '" + t.name + "' is implausibly large");
    t.bytes = static_cast<size_t>(t.elements() / tr->block_size) * tr->block_bytes;
    if (tensor_index_.count(t.name)) return make_error("tensor '" + t.name + "' appears twice");
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  size_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  for (auto& t : tensors_) {
    if (t.offset % alignment_ != 0) return make_error("tensor '" + t.name + "' data offset is not aligned");
    if (data_start > size_ || t.offset > size_ - data_start || t.bytes > size_ - data_start - t.offset)
      return make_error("file is truncated: tensor '" + t.name + "' data lies past the end of the file");
    t.data = base_ + data_start + t.offset;
  }
  return {};
}

const gguf_value* gguf_file::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const gguf_tensor* gguf_file::tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

result<std::string> gguf_file::get_string(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return make_error("missing metadata key '" + key + "'");
  if (v->type != gguf_value_type::string) return make_error("metadata key '" + key + "' is not a string");
  return v->as_string();
}

result<int64_t> gguf_file::get_int(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return make_error("missing metadata key '" + key + "'");
  if (!v->is_integer()) return make_error("metadata key '" + key + "' is not an integer");
  return v->as_int();
}

result<double> gguf_file::get_float(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return make_error("missing metadata key '" + key + "'");
  if (!v->is_float() && !v->is_integer()) return make_error("metadata key '" + key + "' is not a number");
  return v->as_double();
}

result<bool> gguf_file::get_bool(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return make_error("missing metadata key '" + key + "'");
  if (v->type != gguf_value_type::boolean) return make_error("metadata key '" + key + "' is not a bool");
  return std::get<bool>(v->v);
}

std::string gguf_file::get_string_or(const std::string& key, std::string dflt) const {
  auto r = get_string(key);
  return r ? r.value() : dflt;
}
int64_t gguf_file::get_int_or(const std::string& key, int64_t dflt) const {
  auto r = get_int(key);
  return r ? r.value() : dflt;
}
result<int64_t> gguf_file::get_int(const std::string& key, int64_t dflt) const {
  if (!has(key)) return dflt;
  return get_int(key);
}

result<double> gguf_file::get_float(const std::string& key, double dflt) const {
  if (!has(key)) return dflt;
  return get_float(key);
}

result<std::vector<std::string>> gguf_file::get_string_array(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return make_error("missing metadata key '" + key + "'");
  if (v->type != gguf_value_type::array || v->array_type != gguf_value_type::string)
    return make_error("metadata key '" + key + "' is not an array of strings");
  std::vector<std::string> out;
  out.reserve(v->as_array().size());
  for (const auto& e : v->as_array()) out.push_back(e.as_string());
  return out;
}

result<std::vector<double>> gguf_file::get_float_array(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return make_error("missing metadata key '" + key + "'");
  if (v->type != gguf_value_type::array) return make_error("metadata key '" + key + "' is not an array");
  std::vector<double> out;
  for (const auto& e : v->as_array()) {
    if (!e.is_float() && !e.is_integer()) return make_error("metadata key '" + key + "' is not an array of numbers");
    out.push_back(e.as_double());
  }
  return out;
}

result<std::vector<int64_t>> gguf_file::get_int_array(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return make_error("missing metadata key '" + key + "'");
  if (v->type != gguf_value_type::array) return make_error("metadata key '" + key + "' is not an array");
  std::vector<int64_t> out;
  for (const auto& e : v->as_array()) {
    if (!e.is_integer()) return make_error("metadata key '" + key + "' is not an array of integers");
    out.push_back(e.as_int());
  }
  return out;
}

}  // namespace troupe::model
