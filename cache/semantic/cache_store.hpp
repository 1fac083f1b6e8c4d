#pragma once
// The semantic cache's durable half: cache records in RocksDB. The write-ahead log is on, so a
// write that returned has reached the operating system and survives a crash or kill -9 of this
// process (with sync_writes, also a power loss). Each record is one key; its hit statistics are
// a second, small key, so a hit rewrites 16 bytes rather than the answer.
//
// Keys: "e" + big-endian id -> encode_record; "h" + big-endian id -> encode_hit_stats;
// "format" -> k_store_format. A directory holding anything else is refused.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/semantic/cache_record.hpp"
#include "common/result.hpp"

namespace rocksdb {
class DB;
}

namespace troupe::cache {

inline constexpr const char* k_store_format = "troupe-semantic-cache/1";

struct store_options {
  std::string path;            // the RocksDB directory; created when missing
  bool sync_writes = false;    // fsync the log on each write (power-loss safe, slower)
};

class cache_store {
 public:
  // Fails with a message naming the directory and RocksDB's reason (unwritable, corrupt, not a
  // cache directory, written by another format).
  static result<std::unique_ptr<cache_store>> open(const store_options& o);
  ~cache_store();
  cache_store(const cache_store&) = delete;
  cache_store& operator=(const cache_store&) = delete;

  // Writes the record and its hit statistics in one atomic batch (replacing any with its id).
  status put(const cache_record& r);
  status put_hit_stats(uint64_t id, int64_t last_hit_ms, int64_t hits);
  status erase(uint64_t id);
  // The record with that id (hit statistics filled in), or nullopt when there is none.
  result<std::optional<cache_record>> get(uint64_t id) const;

  // Calls fn for every record in id order. Records that cannot be decoded are deleted and
  // described in `problems`; hit statistics without a record are deleted too.
  status scan(const std::function<void(cache_record&&)>& fn, std::vector<std::string>& problems);

  const std::string& path() const { return opts_.path; }

 private:
  cache_store() = default;

  store_options opts_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace troupe::cache
