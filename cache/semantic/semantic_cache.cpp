#include "cache/semantic/semantic_cache.hpp"

#include <sys/statvfs.h>

#include <chrono>

#include <spdlog/spdlog.h>

#include "cache/semantic/question_guard.hpp"

namespace troupe::cache {

namespace {

// Cuts s to at most n bytes without splitting a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

}  // namespace

semantic_cache::semantic_cache(semantic_cache_config cfg, std::unique_ptr<embedder> e)
    : cfg_(std::move(cfg)), embedder_(std::move(e)) {
  if (!cfg_.enabled) {
    status_ = "disabled in the config";
    return;
  }
  auto store = cache_store::open({cfg_.path, cfg_.sync_writes});
  if (!store) {
    status_ = "disabled: " + store.error();
    spdlog::warn("troupe: semantic cache {}", status_);
    return;
  }
  store_ = std::move(store.value());
  enabled_ = true;
  if (!embedder_) {
    auto made = embedder_registry().make(cfg_.embedder, cfg_.embedder_opts);
    if (made) {
      embedder_ = std::move(made.value());
    } else {
      status_ = "exact-match only: " + made.error();
      spdlog::warn("troupe: semantic cache {}", status_);
    }
  }
  semantic_ = embedder_ != nullptr;
  if (semantic_) cfg_.index.dimension = embedder_->dimension();
  load_from_store();
  if (cfg_.async_insert) worker_ = std::thread([this] { worker_loop(); });
}

semantic_cache::~semantic_cache() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(q_mu_);
      stop_ = true;
    }
    q_cv_.notify_all();
    worker_.join();
  }
}

bool semantic_cache::cacheable(const cache_query& q) {
  if (q.cache == cache_choice::refused) return false;
  return (q.sampling.temperature <= 0.0f || q.cache == cache_choice::requested) && q.sampling.n_logprobs == 0;
}

int64_t semantic_cache::now_ms() const {
  if (cfg_.clock_ms) return cfg_.clock_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool semantic_cache::expired(const entry_meta& m, int64_t now) const {
  return cfg_.ttl_s > 0 && now - m.created_ms >= cfg_.ttl_s * 1000;
}

void semantic_cache::load_from_store() {
  std::vector<std::string> problems;
  std::vector<uint64_t> stale;
  size_t skipped_vectors = 0;
  const int64_t now = now_ms();
  auto s = store_->scan(
      [&](cache_record&& rec) {
        next_id_ = std::max(next_id_, rec.id + 1);
        if (cfg_.ttl_s > 0 && now - rec.created_ms >= cfg_.ttl_s * 1000) {
          stale.push_back(rec.id);
          return;
        }
        // Vectors of another embedder (or none) are not comparable: exact path only.
        if (!semantic_ || rec.embedder != embedder_->name() ||
            rec.embedding.size() != static_cast<size_t>(cfg_.index.dimension)) {
          if (!rec.embedding.empty()) ++skipped_vectors;
          rec.embedding.clear();
        }
        add_locked(rec, encode_record(rec).size());
      },
      problems);
  for (const auto& p : problems) spdlog::warn("troupe: semantic cache at {}: dropped {}", cfg_.path, p);
  if (!s) {
    ++st_.store_failures;
    status_ = s.error();
    spdlog::warn("troupe: semantic cache {}", status_);
  }
  if (skipped_vectors)
    spdlog::info("troupe: semantic cache: {} entries were embedded by another embedder; exact path only for them",
                 skipped_vectors);
  st_.expirations += static_cast<int64_t>(stale.size());
  auto victims = victims_locked(now);
  for (uint64_t id : victims) remove_locked(id);
  victims.insert(victims.end(), stale.begin(), stale.end());
  erase_from_store(victims);
  spdlog::info("troupe: semantic cache at {}: {} entries{}", cfg_.path, entries_.size(),
               semantic_ ? ", embedder " + embedder_->name() : ", exact-match only");
}

std::optional<semantic_hit> semantic_cache::lookup(const cache_query& q) {
  if (!enabled_) return std::nullopt;
  // The exact path compares the question as sent: whitespace is part of a prompt (a trailing
  // space changes the tokens, and a raw completion's answer); the embedding and the lexical
  // guards read it with its whitespace runs made one space.
  std::string question = q.question;
  const std::string normalized = normalize_question(question);
  if (!cacheable(q) || normalized.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++st_.skipped;
    return std::nullopt;
  }
  const int64_t now = now_ms();
  const fingerprint ctx = context_fingerprint(q);
  const fingerprint ex = exact_fingerprint(ctx, question);

  // 1. The exact path: no embedding needed.
  uint64_t exact_id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++st_.lookups;
    if (auto it = exact_.find(ex); it != exact_.end()) {
      auto m = entries_.find(it->second);
      if (m != entries_.end() && !expired(m->second, now)) exact_id = it->second;
    }
  }
  if (exact_id) {
    if (auto hit = serve(exact_id, ctx, &question, 1.0f, now)) return hit;
  }

  // 2. The semantic path.
  std::vector<float> embedding;
  if (semantic_) {
    const std::string_view cut = utf8_prefix(normalized, cfg_.max_question_bytes);
    const bool whole = cut.size() == normalized.size() && embedder_->fits(cut);
    if (whole || cfg_.semantic_for_truncated) {
      auto v = embedder_->embed(cut);
      if (v && v.value().size() == static_cast<size_t>(cfg_.index.dimension)) {
        embedding = std::move(v.value());
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        ++st_.embed_failures;
      }
    }
  }
  if (!embedding.empty()) {
    uint64_t best = 0;
    float best_sim = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto p = partitions_.find(ctx); p != partitions_.end()) {
        // Nearest first; the first candidate above the threshold that the guards let through.
        for (const auto& n : p->second.search(embedding.data(), 4)) {
          if (n.similarity < cfg_.threshold) break;
          auto m = entries_.find(n.label);
          if (m == entries_.end() || expired(m->second, now)) continue;
          if (cfg_.lexical_guards && !may_share_answer(normalized, normalize_question(m->second.prompt)).ok) {
            ++st_.guard_refusals;
            continue;
          }
          best = n.label;
          best_sim = n.similarity;
          break;
        }
      }
    }
    if (best) {
      if (auto hit = serve(best, ctx, nullptr, best_sim, now)) return hit;
    }
  }

  // 3. A miss: remember it, to store its answer.
  std::lock_guard<std::mutex> lock(mu_);
  pending_[q.id] = pending_miss{ctx, ex, q.model, std::move(question), std::move(embedding)};
  pending_order_.push_back(q.id);
  while (pending_order_.size() > cfg_.max_pending) {
    pending_.erase(pending_order_.front());
    pending_order_.pop_front();
  }
  return std::nullopt;
}

std::optional<semantic_hit> semantic_cache::serve(uint64_t id, const fingerprint& ctx, const std::string* exact_question,
                                                  float similarity, int64_t now) {
  const bool exact = exact_question != nullptr;
  auto rec = store_->get(id);
  // The fingerprints are 128 bits; checking the stored question too makes the exact path exact.
  if (!rec || !rec.value() || rec.value()->context != ctx || (exact && rec.value()->prompt != *exact_question)) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!rec) {
      ++st_.store_failures;
      st_.status = rec.error();
    }
    return std::nullopt;
  }
  cache_record& c = *rec.value();
  semantic_hit h;
  h.tokens = std::move(c.tokens);
  h.logprobs = std::move(c.logprobs);
  h.finish_reason = std::move(c.finish_reason);
  h.entry_id = id;
  h.similarity = similarity;
  h.exact = exact;
  h.text = std::move(c.text);
  h.matched_prompt = std::move(c.prompt);
  int64_t hits = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto m = entries_.find(id);
    if (m == entries_.end()) return std::nullopt;  // evicted meanwhile
    by_last_hit_.erase({m->second.last_hit_ms, id});
    m->second.last_hit_ms = std::max(m->second.last_hit_ms, now);
    hits = ++m->second.hits;
    by_last_hit_.insert({m->second.last_hit_ms, id});
    ++st_.hits;
    ++(exact ? st_.exact_hits : st_.semantic_hits);
  }
  run_async([this, id, now, hits] {
    if (!enabled_ || !may_write(64)) return;
    if (auto s = store_->put_hit_stats(id, now, hits); !s) {
      std::lock_guard<std::mutex> lock(mu_);
      ++st_.store_failures;
      st_.status = s.error();
      disable_locked("a write failed: " + s.error());
    }
  });
  return h;
}

void semantic_cache::on_closed(const finished_answer& c) {
  if (!enabled_) return;
  pending_miss p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(c.id);
    if (it == pending_.end()) return;
    p = std::move(it->second);
    pending_.erase(it);
  }
  if (!c.complete()) return;
  cache_record rec;
  rec.context = p.context;
  rec.exact = p.exact;
  rec.model = std::move(p.model);
  rec.prompt = std::move(p.question);
  if (!p.embedding.empty()) rec.embedder = embedder_->name();
  rec.embedding = std::move(p.embedding);
  rec.tokens = c.tokens;
  rec.logprobs = c.logprobs;
  rec.finish_reason = c.finish_reason;
  if (detokenize_) rec.text = detokenize_(rec.tokens);
  rec.created_ms = rec.last_hit_ms = now_ms();
  run_async([this, rec = std::move(rec)]() mutable { insert(std::move(rec)); });
}

void semantic_cache::disable_locked(const std::string& why) {
  if (!enabled_) return;
  enabled_ = false;
  status_ = "disabled: " + why;
  pending_.clear();
  pending_order_.clear();
  spdlog::error("troupe: semantic cache at {} {}; serving goes on without it", cfg_.path, status_);
}

std::string semantic_cache::disk_too_full(size_t bytes) {
  if (cfg_.min_free_disk_mib == 0) return {};
  const uint64_t bound = static_cast<uint64_t>(cfg_.min_free_disk_mib) << 20;
  // RocksDB writes a record to its log, then again when it flushes the memtable: count it twice.
  const uint64_t cost = 2 * static_cast<uint64_t>(bytes) + 4096;
  std::lock_guard<std::mutex> lock(disk_mu_);
  const auto now = std::chrono::steady_clock::now();
  const bool stale = now - disk_checked_ >= std::chrono::seconds(1);
  const bool margin_used = disk_written_ + cost + bound > disk_free_;
  if (stale || margin_used) {
    struct statvfs v {};
    if (::statvfs(cfg_.path.c_str(), &v) != 0) return {};  // cannot tell: let RocksDB report it
    disk_free_ = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
    disk_written_ = 0;
    disk_checked_ = now;
  }
  if (disk_written_ + cost + bound > disk_free_)
    return "the disk is nearly full: " + std::to_string(disk_free_ >> 20) + " MiB free at " + cfg_.path +
           ", under cache.min_free_disk_mib (" + std::to_string(cfg_.min_free_disk_mib) + ")";
  disk_written_ += cost;
  return {};
}

bool semantic_cache::may_write(size_t bytes) {
  auto why = disk_too_full(bytes);
  if (why.empty()) return true;
  std::lock_guard<std::mutex> lock(mu_);
  ++st_.store_failures;
  disable_locked(why);
  return false;
}

std::string semantic_cache::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void semantic_cache::set_detokenizer(std::function<std::string(const std::vector<int32_t>&)> f) {
  detokenize_ = std::move(f);
}

void semantic_cache::insert(cache_record rec) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    rec.id = next_id_++;
  }
  const size_t bytes = encode_record(rec).size();
  if (!may_write(bytes)) return;
  if (auto s = store_->put(rec); !s) {
    std::lock_guard<std::mutex> lock(mu_);
    ++st_.store_failures;
    st_.status = s.error();
    disable_locked("a write failed: " + s.error());
    return;
  }
  std::vector<uint64_t> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The same question answered twice (two misses in flight): the newer answer replaces.
    if (auto it = exact_.find(rec.exact); it != exact_.end()) {
      gone.push_back(it->second);
      remove_locked(it->second);
    }
    add_locked(rec, bytes);
    ++st_.stores;
    auto v = victims_locked(rec.created_ms);
    for (uint64_t id : v) remove_locked(id);
    gone.insert(gone.end(), v.begin(), v.end());
  }
  erase_from_store(gone);
}

void semantic_cache::add_locked(const cache_record& rec, size_t bytes) {
  entry_meta m;
  m.context = rec.context;
  m.exact = rec.exact;
  m.created_ms = rec.created_ms;
  m.last_hit_ms = rec.last_hit_ms;
  m.hits = rec.hits;
  m.bytes = bytes;
  m.prompt = rec.prompt;
  entries_[rec.id] = std::move(m);
  const entry_meta& mm = entries_[rec.id];
  exact_[rec.exact] = rec.id;
  by_last_hit_.insert({mm.last_hit_ms, rec.id});
  by_created_.insert({mm.created_ms, rec.id});
  bytes_ += bytes;
  if (!rec.embedding.empty()) {
    auto p = partitions_.find(rec.context);
    if (p == partitions_.end()) p = partitions_.emplace(rec.context, vector_index(cfg_.index)).first;
    p->second.add(rec.id, rec.embedding.data());
  }
}

void semantic_cache::remove_locked(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  const entry_meta& m = it->second;
  if (auto e = exact_.find(m.exact); e != exact_.end() && e->second == id) exact_.erase(e);
  by_last_hit_.erase({m.last_hit_ms, id});
  by_created_.erase({m.created_ms, id});
  bytes_ -= m.bytes;
  if (auto p = partitions_.find(m.context); p != partitions_.end()) {
    p->second.remove(id);
    if (p->second.size() == 0) partitions_.erase(p);
  }
  entries_.erase(it);
}

std::vector<uint64_t> semantic_cache::victims_locked(int64_t now) {
  std::vector<uint64_t> out;
  std::set<uint64_t> chosen;
  if (cfg_.ttl_s > 0) {
    for (const auto& [created, id] : by_created_) {
      if (now - created < cfg_.ttl_s * 1000) break;
      out.push_back(id);
      chosen.insert(id);
      ++st_.expirations;
    }
  }
  size_t n = entries_.size() - out.size();
  size_t bytes = bytes_;
  for (uint64_t id : out) bytes -= entries_.at(id).bytes;
  for (auto it = by_last_hit_.begin(); it != by_last_hit_.end() && (n > cfg_.max_entries || bytes > cfg_.max_bytes); ++it) {
    if (chosen.count(it->second)) continue;
    out.push_back(it->second);
    --n;
    bytes -= entries_.at(it->second).bytes;
    ++st_.evictions;
  }
  return out;
}

void semantic_cache::erase_from_store(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) {
    if (!may_write(64)) return;
    if (auto s = store_->erase(id); !s) {
      std::lock_guard<std::mutex> lock(mu_);
      ++st_.store_failures;
      st_.status = s.error();
      disable_locked("a write failed: " + s.error());
      return;
    }
  }
}

void semantic_cache::expire() {
  if (!enabled_) return;
  std::vector<uint64_t> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone = victims_locked(now_ms());
    for (uint64_t id : gone) remove_locked(id);
  }
  erase_from_store(gone);
}

void semantic_cache::run_async(std::function<void()> task) {
  if (!worker_.joinable()) {
    task();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(q_mu_);
    queue_.push_back(std::move(task));
  }
  q_cv_.notify_one();
}

void semantic_cache::worker_loop() {
  std::unique_lock<std::mutex> lock(q_mu_);
  for (;;) {
    q_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained: queued inserts are never dropped
    auto task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void semantic_cache::flush() {
  if (!worker_.joinable()) return;
  std::unique_lock<std::mutex> lock(q_mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

semantic_cache_stats semantic_cache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  semantic_cache_stats s = st_;
  s.entries = static_cast<int64_t>(entries_.size());
  s.bytes = static_cast<int64_t>(bytes_);
  s.enabled = enabled_;
  s.semantic = semantic_ && enabled_;
  if (!status_.empty()) s.status = status_;  // why disabled or exact-only outranks the last error
  return s;
}

}  // namespace troupe::cache
