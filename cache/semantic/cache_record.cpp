#include "cache/semantic/cache_record.hpp"

#include <cstring>

#include "cache/semantic/detail/murmur3.hpp"
#include "common/bytes.hpp"

namespace troupe::cache {

namespace {

constexpr uint8_t k_format = 1;

// Lengths and counts are 32 bits in the record format.
using writer = byte_writer<uint32_t>;
using reader = byte_reader<uint32_t>;

}  // namespace

std::string fingerprint::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[static_cast<size_t>(15 - i)] = digits[(hi >> (4 * i)) & 15];
    s[static_cast<size_t>(31 - i)] = digits[(lo >> (4 * i)) & 15];
  }
  return s;
}

fingerprint fingerprint_of(std::string_view bytes, uint64_t seed) {
  uint64_t h[2];
  detail::murmur3_128(bytes.data(), bytes.size(), seed, h);
  return {h[0], h[1]};
}

std::string encode_record(const cache_record& r) {
  writer w;
  w.raw(k_format);
  w.raw(r.id);
  w.raw(r.context.hi);
  w.raw(r.context.lo);
  w.raw(r.exact.hi);
  w.raw(r.exact.lo);
  w.str(r.model);
  w.str(r.prompt);
  w.str(r.embedder);
  w.vec(r.embedding);
  w.vec(r.tokens);
  w.vec(r.logprobs);
  w.str(r.text);
  w.str(r.finish_reason);
  w.raw(r.created_ms);
  // A checksum of everything before it: RocksDB checks its own blocks, this checks our encoding.
  std::string s = w.take();
  const fingerprint sum = fingerprint_of(s, 0x7472u);
  s.append(reinterpret_cast<const char*>(&sum.lo), sizeof sum.lo);
  return s;
}

result<cache_record> decode_record(std::string_view bytes) {
  if (bytes.size() < 1 + 8) return make_error("record of " + std::to_string(bytes.size()) + " bytes is too short");
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + body.size(), 8);
  if (fingerprint_of(body, 0x7472u).lo != sum) return make_error("record checksum mismatch");
  reader rd(body);
  cache_record r;
  uint8_t format = 0;
  if (!rd.raw(format) || format != k_format) return make_error("record format " + std::to_string(format) + " is unknown");
  const bool ok = rd.raw(r.id) && rd.raw(r.context.hi) && rd.raw(r.context.lo) && rd.raw(r.exact.hi) &&
                  rd.raw(r.exact.lo) && rd.str(r.model) && rd.str(r.prompt) && rd.str(r.embedder) &&
                  rd.vec(r.embedding) && rd.vec(r.tokens) && rd.vec(r.logprobs) && rd.str(r.text) &&
                  rd.str(r.finish_reason) && rd.raw(r.created_ms) && rd.done();
  if (!ok) return make_error("record is truncated or has trailing bytes");
  r.last_hit_ms = r.created_ms;
  return r;
}

std::string encode_hit_stats(int64_t last_hit_ms, int64_t hits) {
  writer w;
  w.raw(last_hit_ms);
  w.raw(hits);
  return w.take();
}

bool decode_hit_stats(std::string_view bytes, int64_t& last_hit_ms, int64_t& hits) {
  reader rd(bytes);
  return rd.raw(last_hit_ms) && rd.raw(hits) && rd.done();
}

}  // namespace troupe::cache
