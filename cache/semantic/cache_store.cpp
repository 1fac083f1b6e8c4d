#include "cache/semantic/cache_store.hpp"

#include <cstdarg>
#include <cstdio>
#include <filesystem>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

namespace troupe::cache {

namespace {

std::string key_of(char kind, uint64_t id) {
  std::string k(9, '\0');
  k[0] = kind;
  for (int i = 0; i < 8; ++i) k[static_cast<size_t>(1 + i)] = static_cast<char>((id >> (56 - 8 * i)) & 0xFF);
  return k;
}

uint64_t id_of(const rocksdb::Slice& k) {
  uint64_t id = 0;
  for (size_t i = 1; i < 9; ++i) id = (id << 8) | static_cast<uint8_t>(k[i]);
  return id;
}

// RocksDB's messages go to spdlog instead of its LOG file: that file is one more writer on the
// cache's disk, and when the disk fills Debian's librocksdb (built with assertions) aborts the
// process on the next line it appends, even once the cache has turned itself off.
class spdlog_rocksdb_logger final : public rocksdb::Logger {
 public:
  spdlog_rocksdb_logger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}
  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char buf[1024];
    std::vsnprintf(buf, sizeof buf, format, ap);
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) spdlog::error("troupe: rocksdb: {}", buf);
    else spdlog::warn("troupe: rocksdb: {}", buf);
  }
};

bool is_id_key(const rocksdb::Slice& k, char kind) { return k.size() == 9 && k[0] == kind; }

}  // namespace

result<std::unique_ptr<cache_store>> cache_store::open(const store_options& o) {
  std::unique_ptr<cache_store> s(new cache_store());
  s->opts_ = o;
  rocksdb::Options ro;
  ro.create_if_missing = true;
  ro.paranoid_checks = true;
  ro.max_background_jobs = 2;
  ro.info_log = std::make_shared<spdlog_rocksdb_logger>();
  // The log holds every write already; a memtable flush at close would write a table file, on a
  // disk that may be full (see semantic_cache::disk_too_full).
  ro.avoid_flush_during_shutdown = true;
  // Point-in-time recovery: after a crash, everything up to the last complete log record.
  ro.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // The whole path is made here, not by RocksDB: it creates the last folder only (the default
  // path, "data/semantic-cache", has two), and before creating it, it lists it and logs the
  // NotFound as an error, an alarming line on every first start. A failure here (a file in the
  // way, no permission) is left to DB::Open to report.
  std::error_code ec;
  std::filesystem::create_directories(o.path, ec);
  rocksdb::DB* db = nullptr;
  auto st = rocksdb::DB::Open(ro, o.path, &db);
  if (!st.ok()) return make_error("cannot open the cache store at " + o.path + ": " + st.ToString());
  s->db_.reset(db);

  std::string format;
  st = db->Get(rocksdb::ReadOptions(), "format", &format);
  if (st.ok()) {
    if (format != k_store_format)
      return make_error("the cache store at " + o.path + " has format '" + format + "', this build reads '" +
                        k_store_format + "'");
  } else if (st.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) return make_error(o.path + " holds a RocksDB database that is not a Troupe cache store");
    if (!it->status().ok()) return make_error("cannot read the cache store at " + o.path + ": " + it->status().ToString());
    rocksdb::WriteOptions wo;
    wo.sync = true;
    st = db->Put(wo, "format", k_store_format);
    if (!st.ok()) return make_error("cannot write to the cache store at " + o.path + ": " + st.ToString());
  } else {
    return make_error("cannot read the cache store at " + o.path + ": " + st.ToString());
  }
  return s;
}

cache_store::~cache_store() {
  if (db_) (void)db_->Close();
}

status cache_store::put(const cache_record& r) {
  rocksdb::WriteBatch b;
  b.Put(key_of('e', r.id), encode_record(r));
  b.Put(key_of('h', r.id), encode_hit_stats(r.last_hit_ms, r.hits));
  rocksdb::WriteOptions wo;
  wo.sync = opts_.sync_writes;
  auto st = db_->Write(wo, &b);
  if (!st.ok()) return make_error("cache store write failed: " + st.ToString());
  return {};
}

status cache_store::put_hit_stats(uint64_t id, int64_t last_hit_ms, int64_t hits) {
  rocksdb::WriteOptions wo;
  wo.sync = opts_.sync_writes;
  auto st = db_->Put(wo, key_of('h', id), encode_hit_stats(last_hit_ms, hits));
  if (!st.ok()) return make_error("cache store write failed: " + st.ToString());
  return {};
}

status cache_store::erase(uint64_t id) {
  rocksdb::WriteBatch b;
  b.Delete(key_of('e', id));
  b.Delete(key_of('h', id));
  rocksdb::WriteOptions wo;
  wo.sync = opts_.sync_writes;
  auto st = db_->Write(wo, &b);
  if (!st.ok()) return make_error("cache store delete failed: " + st.ToString());
  return {};
}

result<std::optional<cache_record>> cache_store::get(uint64_t id) const {
  std::string v, h;
  auto st = db_->Get(rocksdb::ReadOptions(), key_of('e', id), &v);
  if (st.IsNotFound()) return std::optional<cache_record>();
  if (!st.ok()) return make_error("cache store read failed: " + st.ToString());
  auto r = decode_record(v);
  if (!r) return make_error("cache record " + std::to_string(id) + ": " + r.error());
  if (db_->Get(rocksdb::ReadOptions(), key_of('h', id), &h).ok()) {
    int64_t last = 0, hits = 0;
    if (decode_hit_stats(h, last, hits)) {
      r.value().last_hit_ms = last;
      r.value().hits = hits;
    }
  }
  return std::optional<cache_record>(std::move(r.value()));
}

status cache_store::scan(const std::function<void(cache_record&&)>& fn, std::vector<std::string>& problems) {
  std::vector<std::string> bad_keys;
  {
    // Records and their hit statistics are read with two iterators walking side by side.
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    std::unique_ptr<rocksdb::Iterator> hit(db_->NewIterator(rocksdb::ReadOptions()));
    hit->Seek(key_of('h', 0));
    for (it->Seek(key_of('e', 0)); it->Valid() && it->key()[0] == 'e'; it->Next()) {
      const uint64_t id = id_of(it->key());
      auto r = is_id_key(it->key(), 'e') ? decode_record(std::string_view(it->value().data(), it->value().size()))
                                         : result<cache_record>(make_error("malformed key"));
      if (!r || r.value().id != id) {
        problems.push_back("record " + std::to_string(id) + ": " + (r ? "id does not match its key" : r.error()));
        bad_keys.push_back(it->key().ToString());
        continue;
      }
      while (hit->Valid() && is_id_key(hit->key(), 'h') && id_of(hit->key()) < id) {
        bad_keys.push_back(hit->key().ToString());  // statistics of a record that is gone
        hit->Next();
      }
      if (hit->Valid() && is_id_key(hit->key(), 'h') && id_of(hit->key()) == id) {
        int64_t last = 0, hits = 0;
        if (decode_hit_stats(std::string_view(hit->value().data(), hit->value().size()), last, hits)) {
          r.value().last_hit_ms = last;
          r.value().hits = hits;
        }
        hit->Next();
      }
      fn(std::move(r.value()));
    }
    for (; hit->Valid() && is_id_key(hit->key(), 'h'); hit->Next()) bad_keys.push_back(hit->key().ToString());
    if (!it->status().ok()) return make_error("cache store scan failed: " + it->status().ToString());
  }
  for (const auto& k : bad_keys) {
    if (k[0] == 'e') (void)db_->Delete(rocksdb::WriteOptions(), key_of('h', id_of(k)));
    (void)db_->Delete(rocksdb::WriteOptions(), k);
  }
  return {};
}

}  // namespace troupe::cache
