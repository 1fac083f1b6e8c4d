#pragma once
// One cached answer as the store keeps it, its 128-bit fingerprints, and its byte encoding.
// The encoding is versioned and length-checked, so a damaged value is reported, never misread.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.hpp"

namespace troupe::cache {

struct fingerprint {
  uint64_t hi = 0, lo = 0;
  bool operator==(const fingerprint& o) const { return hi == o.hi && lo == o.lo; }
  bool operator!=(const fingerprint& o) const { return !(*this == o); }
  bool operator<(const fingerprint& o) const { return hi != o.hi ? hi < o.hi : lo < o.lo; }
  std::string hex() const;
};

struct fingerprint_hash {
  size_t operator()(const fingerprint& f) const { return static_cast<size_t>(f.hi ^ (f.lo * 0x9e3779b97f4a7c15ull)); }
};

// Fingerprint of a byte string; `seed` separates uses.
fingerprint fingerprint_of(std::string_view bytes, uint64_t seed = 0);

struct cache_record {
  uint64_t id = 0;
  fingerprint context;              // model + system prompt / earlier turns + sampling params + limits
  fingerprint exact;                // context + normalised prompt: the exact-match key
  std::string model;
  std::string prompt;               // the normalised question (whitespace collapsed)
  std::string embedder;             // name() of the embedder that made `embedding`; empty: none
  std::vector<float> embedding;     // unit vector, or empty (exact path only)
  std::vector<int32_t> tokens;      // the answer
  std::vector<float> logprobs;      // per answer token, when the answer had them
  std::string text;                 // the answer's text, when a detokenizer was given
  std::string finish_reason;
  int64_t created_ms = 0;           // wall clock (ms since the epoch): survives restarts
  int64_t last_hit_ms = 0;          // created_ms until the first hit
  int64_t hits = 0;
};

// The record without its hit statistics (those change on every hit and are stored apart).
std::string encode_record(const cache_record& r);
result<cache_record> decode_record(std::string_view bytes);

// Hit statistics: last_hit_ms and hits, 16 bytes.
std::string encode_hit_stats(int64_t last_hit_ms, int64_t hits);
bool decode_hit_stats(std::string_view bytes, int64_t& last_hit_ms, int64_t& hits);

}  // namespace troupe::cache
