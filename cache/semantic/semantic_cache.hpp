#pragma once
// The semantic cache's decisions, without CAF: the "semantic" response cache policy (the
// default), with the shape of cache/exact/exact_cache.hpp (cacheable / lookup / on_closed /
// stats). A lookup first tries the exact path (same context, same whitespace-normalised
// question: no embedding needed), then embeds the question and asks the context's vector index
// for its nearest cached question; at or above `threshold` cosine, that answer is served. A miss
// is remembered by request id with its embedding, and its answer is stored when its stream
// closes normally, on a worker thread (off the request path).
//
// Faults never fail a request: a store that cannot be opened (unwritable, corrupt, not a cache
// directory) disables the cache; an embedder that cannot be loaded leaves the exact path only;
// both say why in status(). A failed read is a miss. A failed write (RocksDB's write error, a
// full disk) turns the cache off, with the reason in status(): later writes would fail alike,
// and a store that stopped taking writes no longer says which answers are current. Serving
// goes on without it; the cache comes back on the next start (or reload of the cache stage).
// Empty questions are not cached; long ones are cut before embedding.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/answer.hpp"
#include "cache/cache_key.hpp"
#include "cache/embed/embedder.hpp"
#include "cache/semantic/cache_record.hpp"
#include "cache/semantic/cache_store.hpp"
#include "cache/semantic/vector_index.hpp"

namespace troupe::cache {

// Every key is documented here, where its default lives.
struct semantic_cache_config {
  bool enabled = true;                        // on in the default config
  std::string path = "data/semantic-cache";   // RocksDB directory (created when missing)
  std::string embedder = "minilm";            // a name in embedder_registry()
  embedder_options embedder_opts;             // model folder, threads, token window
  // Lowest cosine between questions for which a cached answer is served. Chosen on
  // tests/fixtures/paraphrases with minilm and the lexical guards (cache/README.md has the
  // table): from 0.89 on, none of the 64 related-but-different pairs hits (the highest one the
  // guards let through scores 0.882); 0.90 keeps a little margin. About half of the true
  // paraphrases hit at 0.90: MiniLM cannot do much better without false hits. Another embedder
  // needs its own value (hashed_ngrams' scale is unrelated).
  float threshold = 0.90f;
  int64_t ttl_s = 7 * 24 * 3600;              // an answer expires this long after it was stored; 0: never
  size_t max_entries = 100000;                // beyond this, the least recently hit entries go
  size_t max_bytes = size_t{1} << 30;         // encoded records; beyond this, likewise
  size_t max_question_bytes = 8192;           // a longer question is cut (at a UTF-8 boundary) before embedding
  // A question longer than the embedder's window is embedded cut, and two long prompts that
  // differ only past the cut would look identical; by default such questions take only the
  // exact path.
  bool semantic_for_truncated = false;
  // Refuse a semantic match whose question differs from the cached one in its numbers, only in
  // word order, or by one replaced content word (question_guard.hpp says why).
  bool lexical_guards = true;
  bool sync_writes = false;                   // fsync RocksDB's log per write (power-loss safe)
  // Below this much free space on the cache's file system (MiB) the cache turns itself off
  // before writing: Debian's librocksdb aborts the process on a write that hits ENOSPC. 0: no check.
  size_t min_free_disk_mib = 64;
  bool async_insert = true;                   // store answers on a worker thread
  size_t max_pending = 16384;                 // misses remembered until their stream closes
  index_options index;                        // hnswlib knobs; the dimension comes from the embedder
  std::function<int64_t()> clock_ms;          // wall clock in ms (tests inject one); empty: the system's
};

// A cached answer to replay, and how it was found.
struct semantic_hit : cached_answer {
  uint64_t entry_id = 0;
  float similarity = 1.0f;    // cosine between the questions; 1 on the exact path
  bool exact = false;         // found by the exact path
  std::string text;           // the answer's text, when it was stored with one
  std::string matched_prompt; // the cached question (normalised)
};

struct semantic_cache_stats {
  int64_t lookups = 0;        // cacheable requests looked up
  int64_t hits = 0;           // exact_hits + semantic_hits
  int64_t exact_hits = 0;
  int64_t semantic_hits = 0;
  int64_t skipped = 0;        // not cacheable, or an empty question
  int64_t stores = 0;
  int64_t entries = 0;
  int64_t bytes = 0;
  int64_t evictions = 0;      // size limits
  int64_t expirations = 0;    // TTL
  int64_t guard_refusals = 0; // semantic matches above the threshold that question_guard refused
  int64_t embed_failures = 0;
  int64_t store_failures = 0; // failed RocksDB reads and writes
  bool enabled = false;
  bool semantic = false;      // the embedding path is available
  std::string status;         // why disabled or exact-only; the last store error otherwise
};

class semantic_cache {
 public:
  // Opens the store and the embedder (cfg.embedder from the global registry, unless one is
  // given). Never fails; see status().
  explicit semantic_cache(semantic_cache_config cfg, std::unique_ptr<embedder> e = nullptr);
  // Finishes the queued inserts, then closes the store.
  ~semantic_cache();
  semantic_cache(const semantic_cache&) = delete;
  semantic_cache& operator=(const semantic_cache&) = delete;

  // Deterministic requests only: greedy, or an explicit cache request (`cache: true`); never
  // with top logprobs (they are not stored), and never when the request refused the cache
  // (`cache: false`, greedy or not).
  static bool cacheable(const cache_query& q);

  // A hit, or nullopt. A miss of a cacheable request is remembered by id so that its answer can
  // be stored when its stream closes. The question and context are q's texts (the tokens are
  // not looked at).
  std::optional<semantic_hit> lookup(const cache_query& q);
  // A stream ended: store its answer if it was a remembered miss that finished normally.
  void on_closed(const finished_answer& a);

  // Answers are stored with their text when this is set (e.g. the model's detokenizer).
  void set_detokenizer(std::function<std::string(const std::vector<int32_t>&)> f);

  semantic_cache_stats stats() const;
  bool enabled() const { return enabled_; }
  std::string status() const;

  // Removes expired entries now (inserts do it too).
  void expire();
  // Waits until queued inserts and hit updates are written (tests, shutdown).
  void flush();

 private:
  struct entry_meta {
    fingerprint context, exact;
    int64_t created_ms = 0, last_hit_ms = 0, hits = 0;
    size_t bytes = 0;
    std::string prompt;  // for question_guard, without a store read per candidate
  };
  struct pending_miss {
    fingerprint context, exact;
    std::string model, question;
    std::vector<float> embedding;
  };

  int64_t now_ms() const;
  bool expired(const entry_meta& m, int64_t now) const;
  void load_from_store();
  // The hit for entry id, read from the store; exact_question is set on the exact path.
  std::optional<semantic_hit> serve(uint64_t id, const fingerprint& ctx, const std::string* exact_question,
                                    float similarity, int64_t now);
  void insert(cache_record rec);
  // The following need mu_ held.
  void add_locked(const cache_record& rec, size_t bytes);
  void remove_locked(uint64_t id);
  std::vector<uint64_t> victims_locked(int64_t now);
  void erase_from_store(const std::vector<uint64_t>& ids);
  void run_async(std::function<void()> task);
  void worker_loop();

  // A write failed: off from now on, saying why (mu_ held).
  void disable_locked(const std::string& why);
  // Before a store write of about `bytes`: empty when there is room, else why not (the disk is
  // under cfg_.min_free_disk_mib). statvfs is called at most once a second, or sooner when the
  // writes since the last call could have used up the margin it left.
  std::string disk_too_full(size_t bytes);
  // Writes to the store after disk_too_full(bytes) said there was room; otherwise turns the
  // cache off and returns false.
  bool may_write(size_t bytes);

  semantic_cache_config cfg_;
  std::atomic<bool> enabled_{false};  // cleared by the insert worker when a write fails
  bool semantic_ = false;
  std::string status_;  // set before the worker starts, then only under mu_
  std::unique_ptr<cache_store> store_;
  std::unique_ptr<embedder> embedder_;
  std::function<std::string(const std::vector<int32_t>&)> detokenize_;

  mutable std::mutex mu_;  // everything below
  std::unordered_map<uint64_t, entry_meta> entries_;
  std::unordered_map<fingerprint, uint64_t, fingerprint_hash> exact_;
  std::unordered_map<fingerprint, vector_index, fingerprint_hash> partitions_;  // one per context
  std::set<std::pair<int64_t, uint64_t>> by_last_hit_;
  std::set<std::pair<int64_t, uint64_t>> by_created_;
  size_t bytes_ = 0;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, pending_miss> pending_;
  std::list<uint64_t> pending_order_;  // bounds pending_ when closes get lost
  semantic_cache_stats st_;

  // The free-space guard (disk_too_full).
  std::mutex disk_mu_;
  std::chrono::steady_clock::time_point disk_checked_{};
  uint64_t disk_free_ = 0;      // bytes free at the last statvfs
  uint64_t disk_written_ = 0;   // bytes (estimated) written since

  // The insert worker.
  std::mutex q_mu_;
  std::condition_variable q_cv_, idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::thread worker_;
};

}  // namespace troupe::cache
