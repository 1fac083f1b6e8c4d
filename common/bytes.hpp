#pragma once
// Values to and from bytes, as they lie in memory (little-endian on every platform Troupe builds
// for), with a length before each string and array. The GGUF writer, the response cache's keys
// and its stored records all write this way; each picks the width of its lengths (`Length`),
// which is part of its format.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace troupe {

// Appends to `Bytes`: a std::string or a std::vector<uint8_t>.
template <class Length, class Bytes = std::string>
class byte_writer {
 public:
  template <class T>
  void raw(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "raw() writes a value's bytes as they are");
    append(&v, sizeof(T));
  }
  void append(const void* data, size_t n) {
    const auto* p = static_cast<const typename Bytes::value_type*>(data);
    out_.insert(out_.end(), p, p + n);
  }
  // The length, then the bytes.
  void str(std::string_view s) {
    raw(static_cast<Length>(s.size()));
    append(s.data(), s.size());
  }
  // The element count, then the elements' bytes.
  template <class T>
  void vec(const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>, "vec() writes the elements' bytes as they are");
    raw(static_cast<Length>(v.size()));
    if (!v.empty()) append(v.data(), v.size() * sizeof(T));
  }
  // Zero bytes up to a multiple of `align`.
  void pad_to(size_t align) {
    while (out_.size() % align) out_.push_back(0);
  }
  const Bytes& bytes() const { return out_; }
  Bytes take() { return std::move(out_); }

 private:
  Bytes out_;
};

// Reads what a byte_writer with the same `Length` wrote. Every read checks the bytes left: a
// short or damaged input makes it return false, never read past the end.
template <class Length>
class byte_reader {
 public:
  explicit byte_reader(std::string_view s) : s_(s) {}
  template <class T>
  bool raw(T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "raw() reads a value's bytes as they are");
    if (s_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool str(std::string& v) {
    Length n;
    if (!raw(n) || s_.size() - pos_ < n) return false;
    v.assign(s_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <class T>
  bool vec(std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>, "vec() reads the elements' bytes as they are");
    Length n;
    if (!raw(n) || (s_.size() - pos_) / sizeof(T) < n) return false;
    v.resize(n);
    if (n) std::memcpy(v.data(), s_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return true;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace troupe
