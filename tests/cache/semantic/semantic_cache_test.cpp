// The semantic cache's decisions, driven directly with the cheap hashed-n-gram embedder.
#include "cache/semantic/semantic_cache.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <filesystem>
#include <cstdlib>
#include <unistd.h>

#include "cache/embed/hashed_ngram_embedder.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe::cache;
using troupe::named_registry;

namespace {

class fake_clock {
 public:
  int64_t now = 1'700'000'000'000;
  std::function<int64_t()> fn() {
    return [this] { return now; };
  }
};

// Fails every embed(), for the fault tests.
class failing_embedder final : public embedder {
 public:
  troupe::result<std::vector<float>> embed(std::string_view) override { return troupe::make_error("broken on purpose"); }
  int dimension() const override { return 64; }
  std::string name() const override { return "failing"; }
};

struct fixture {
  troupe::test::temp_dir dir{"semcache"};
  fake_clock clock;
  semantic_cache_config cfg;
  uint64_t next_id = 1;

  fixture() {
    cfg.path = dir.str("db");
    cfg.threshold = 0.80f;
    cfg.async_insert = false;
    cfg.clock_ms = clock.fn();
  }
  std::unique_ptr<semantic_cache> open(std::unique_ptr<embedder> e = std::make_unique<hashed_ngram_embedder>(256)) {
    return std::make_unique<semantic_cache>(cfg, std::move(e));
  }
  cache_query request(const std::string& model = "smollm2") {
    cache_query r;
    r.id = next_id++;
    r.model = model;
    r.prompt = {1, 2, 3};
    r.max_tokens = 64;
    r.eog = {2};
    return r;
  }
  static finished_answer answer(uint64_t id, std::vector<int32_t> tokens, const char* finish = "stop") {
    finished_answer c;
    c.id = id;
    c.finish_reason = finish;
    c.tokens = std::move(tokens);
    c.logprobs.assign(c.tokens.size(), -0.5f);
    return c;
  }
  // A miss for `question`, answered with `tokens`.
  void teach(semantic_cache& c, const std::string& question, std::vector<int32_t> tokens, const std::string& system = "") {
    auto r = request();
    ASSERT_FALSE(c.lookup(ask(r, question, system)).has_value()) << question;
    c.on_closed(answer(r.id, std::move(tokens)));
  }
  // The lookup of request `r` with these texts, as the response-cache stage makes it.
  static cache_query ask(cache_query r, const std::string& question, const std::string& system = "") {
    std::vector<message_view> m;
    if (!system.empty()) m.push_back({"system", system});
    m.push_back({"user", question});
    auto texts = cache_query::from_messages(m);
    r.context = std::move(texts.context);
    r.question = std::move(texts.question);
    return r;
  }
};

float cosine(const std::string& a, const std::string& b) {
  hashed_ngram_embedder e(256);
  auto va = e.embed(a), vb = e.embed(b);
  return dot(va.value().data(), vb.value().data(), 256);
}

}  // namespace

TEST(SemanticCache, OnlyDeterministicRequestsAreCacheable) {
  cache_query r;
  EXPECT_TRUE(semantic_cache::cacheable(r));
  r.sampling.temperature = 0.7f;
  r.sampling.seed = 42;  // seeded sampling is reproducible, but not asked for: not cached
  EXPECT_FALSE(semantic_cache::cacheable(r));
  r.cache = cache_choice::requested;
  EXPECT_TRUE(semantic_cache::cacheable(r));
  r.sampling.temperature = 0;
  r.sampling.n_logprobs = 3;
  EXPECT_FALSE(semantic_cache::cacheable(r));  // cache: true still set

  fixture f;
  auto c = f.open();
  auto sampled = f.request();
  sampled.sampling.temperature = 0.7f;
  EXPECT_FALSE(c->lookup(fixture::ask(sampled, "What is the capital of France?")).has_value());
  c->on_closed(fixture::answer(sampled.id, {5, 6}));
  EXPECT_EQ(c->stats().stores, 0);
  EXPECT_EQ(c->stats().skipped, 1);
}

// `cache: false` bypasses the cache for any request, greedy too: not looked up (a stored answer
// is not served) and not stored; the same question without it hits again.
TEST(SemanticCache, ARefusingRequestIsNeitherServedNorStored) {
  cache_query r;
  r.cache = cache_choice::refused;
  EXPECT_FALSE(semantic_cache::cacheable(r));  // greedy

  fixture f;
  auto c = f.open();
  f.teach(*c, "What is the capital of France?", {10, 11, 12});
  auto fresh = f.request();
  fresh.cache = cache_choice::refused;
  EXPECT_FALSE(c->lookup(fixture::ask(fresh, "What is the capital of France?")).has_value());
  c->on_closed(fixture::answer(fresh.id, {20, 21}));
  auto other = f.request();
  other.cache = cache_choice::refused;
  EXPECT_FALSE(c->lookup(fixture::ask(other, "Where is the Eiffel Tower?")).has_value());
  c->on_closed(fixture::answer(other.id, {30}));
  auto st = c->stats();
  EXPECT_EQ(st.stores, 1);  // only the taught answer
  EXPECT_EQ(st.skipped, 2);
  EXPECT_EQ(st.lookups, 1);
  auto hit = c->lookup(fixture::ask(f.request(), "What is the capital of France?"));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, (std::vector<int32_t>{10, 11, 12}));  // not overwritten by the fresh answer
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), "Where is the Eiffel Tower?")).has_value());
}

TEST(SemanticCache, MissStoresTheAnswerAndTheExactPathHitsWithoutEmbedding) {
  fixture f;
  auto c = f.open();
  ASSERT_TRUE(c->enabled()) << c->status();
  f.teach(*c, "What is the capital of France?", {10, 11, 12});
  EXPECT_EQ(c->stats().stores, 1);
  auto hit = c->lookup(fixture::ask(f.request(), "What is the capital of France?"));
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(hit->exact);
  EXPECT_FLOAT_EQ(hit->similarity, 1.0f);
  EXPECT_EQ(hit->tokens, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(hit->logprobs.size(), 3u);
  EXPECT_EQ(hit->finish_reason, "stop");
  // Other whitespace is another prompt (other tokens; a raw completion's answer differs): no
  // exact hit. The semantic path reads the text with its whitespace runs made one space, and
  // finds the question there, reported as what it is.
  auto spaced = c->lookup(fixture::ask(f.request(), "  What is the   capital of France?\n"));
  ASSERT_TRUE(spaced.has_value());
  EXPECT_FALSE(spaced->exact);
  const auto st = c->stats();
  EXPECT_EQ(st.lookups, 3);
  EXPECT_EQ(st.exact_hits, 1);
  EXPECT_EQ(st.entries, 1);
}

TEST(SemanticCache, ASimilarQuestionHitsAboveTheThresholdOnly) {
  const std::string stored = "What is the capital of France?";
  const std::string close = "what is the capital city of France";
  const std::string far = "How do I bake sourdough bread at home?";
  ASSERT_GT(cosine(stored, close), 0.80f);
  ASSERT_LT(cosine(stored, far), 0.80f);
  fixture f;
  auto c = f.open();
  f.teach(*c, stored, {1, 2});
  auto hit = c->lookup(fixture::ask(f.request(), close));
  ASSERT_TRUE(hit.has_value());
  EXPECT_FALSE(hit->exact);
  EXPECT_NEAR(hit->similarity, cosine(stored, close), 1e-4);
  EXPECT_EQ(hit->matched_prompt, stored);
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), far)).has_value());

  f.cfg.threshold = 0.999f;
  fixture g;
  g.cfg.threshold = 0.999f;
  auto strict = g.open();
  g.teach(*strict, stored, {1, 2});
  EXPECT_FALSE(strict->lookup(fixture::ask(g.request(), close)).has_value());
}

TEST(SemanticCache, ModelsPersonasAndParametersNeverShareAnswers) {
  fixture f;
  auto c = f.open();
  const std::string q = "What is the capital of France?";
  f.teach(*c, q, {1, 2}, "You are a pirate.");
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), q, "You are a lawyer.")).has_value());
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), q)).has_value());
  EXPECT_FALSE(c->lookup(fixture::ask(f.request("other-model"), q, "You are a pirate.")).has_value());
  auto longer = f.request();
  longer.max_tokens = 128;
  EXPECT_FALSE(c->lookup(fixture::ask(longer, q, "You are a pirate.")).has_value());
  auto penalised = f.request();
  penalised.sampling.repetition_penalty = 1.2f;
  EXPECT_FALSE(c->lookup(fixture::ask(penalised, q, "You are a pirate.")).has_value());
  auto stops = f.request();
  stops.stop = {"\n"};
  EXPECT_FALSE(c->lookup(fixture::ask(stops, q, "You are a pirate.")).has_value());
  // Greedy decoding ignores the seed, so the key does too.
  auto seeded = f.request();
  seeded.sampling.seed = 99;
  EXPECT_TRUE(c->lookup(fixture::ask(seeded, q, "You are a pirate.")).has_value());
}

// Tenant B asking A's question, word for word or paraphrased, misses by default and hits when
// the cache is shared across tenants.
TEST(SemanticCache, EntriesAreScopedToTheTenantUnlessShared) {
  const std::string q = "What is the capital of France?";
  const std::string paraphrase = "what is the capital city of France";
  for (bool share : {false, true}) {
    fixture f;
    auto c = f.open();
    auto as = [&](const std::string& tenant) {
      auto r = f.request();
      r.tenant = tenant;
      r.share_across_tenants = share;
      return r;
    };
    auto a = as("alice");
    ASSERT_FALSE(c->lookup(fixture::ask(a, q)).has_value());
    c->on_closed(fixture::answer(a.id, {1, 2}));
    ASSERT_TRUE(c->lookup(fixture::ask(as("alice"), paraphrase)).has_value());  // her own paraphrase
    auto exact = c->lookup(fixture::ask(as("bob"), q));
    auto similar = c->lookup(fixture::ask(as("bob"), paraphrase));
    EXPECT_EQ(exact.has_value(), share) << "share_across_tenants " << share;
    EXPECT_EQ(similar.has_value(), share) << "share_across_tenants " << share;
    if (share) {
      EXPECT_TRUE(exact->exact);
      EXPECT_FALSE(similar->exact);
    }
  }
}

// Records stored before tenants were keyed carry a shared fingerprint: after a restart they serve
// shared lookups, never a scoped one (not even of a tenant that has no name).
TEST(SemanticCache, RecordsWithoutATenantNeverMatchAScopedLookup) {
  fixture f;
  const std::string q = "What is the capital of France?";
  {
    auto c = f.open();
    auto old = f.request();
    old.share_across_tenants = true;  // the key an older version stored
    ASSERT_FALSE(c->lookup(fixture::ask(old, q)).has_value());
    c->on_closed(fixture::answer(old.id, {1, 2}));
  }
  auto c = f.open();
  ASSERT_EQ(c->stats().entries, 1);
  for (const char* tenant : {"", "default", "alice"}) {
    auto r = f.request();
    r.tenant = tenant;
    EXPECT_FALSE(c->lookup(fixture::ask(r, q)).has_value()) << tenant;
    EXPECT_FALSE(c->lookup(fixture::ask(r, "what is the capital city of France")).has_value()) << tenant;
  }
  auto shared = f.request();
  shared.tenant = "alice";
  shared.share_across_tenants = true;
  EXPECT_TRUE(c->lookup(fixture::ask(shared, q)).has_value());
}

TEST(SemanticCache, AConstrainedRequestOnlyHitsAnswersMadeUnderTheSameConstraint) {
  fixture f;
  auto c = f.open();
  const std::string q = "List three colours";
  f.teach(*c, q, {1, 2});  // unconstrained
  auto json = f.request();
  json.constraint_kind = "json_schema";
  json.constraint_source = R"({"type":"array","items":{"type":"string"}})";
  EXPECT_FALSE(c->lookup(fixture::ask(json, q)).has_value());
  c->on_closed(fixture::answer(json.id, {9}));
  auto again = f.request();
  again.constraint_kind = json.constraint_kind;
  again.constraint_source = json.constraint_source;
  auto hit = c->lookup(fixture::ask(again, q));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, (std::vector<int32_t>{9}));
  auto other = f.request();
  other.constraint_kind = "regex";
  other.constraint_source = "[a-z]+";
  EXPECT_FALSE(c->lookup(fixture::ask(other, q)).has_value());
  auto plain = c->lookup(fixture::ask(f.request(), q));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->tokens, (std::vector<int32_t>{1, 2}));
}

TEST(SemanticCache, OnlyNormallyFinishedMissesAreStored) {
  fixture f;
  auto c = f.open();
  auto a = f.request();
  ASSERT_FALSE(c->lookup(fixture::ask(a, "Tell me a joke")).has_value());
  c->on_closed(fixture::answer(a.id, {1}, "cancelled"));
  auto b = f.request();
  ASSERT_FALSE(c->lookup(fixture::ask(b, "Tell me a story")).has_value());
  auto failed = fixture::answer(b.id, {1});
  failed.finish_reason.clear();
  c->on_closed(failed);
  auto d = f.request();
  ASSERT_FALSE(c->lookup(fixture::ask(d, "Tell me a riddle")).has_value());
  auto replay = fixture::answer(d.id, {1});
  replay.cached = true;
  c->on_closed(replay);
  c->on_closed(fixture::answer(12345, {1}));  // never looked up
  EXPECT_EQ(c->stats().stores, 0);
  auto e = f.request();
  ASSERT_FALSE(c->lookup(fixture::ask(e, "Count to three")).has_value());
  c->on_closed(fixture::answer(e.id, {1, 2, 3}, "length"));
  EXPECT_EQ(c->stats().stores, 1);
}

TEST(SemanticCache, EmptyAndLongQuestions) {
  fixture f;
  f.cfg.max_question_bytes = 64;
  auto c = f.open();
  auto empty = f.request();
  EXPECT_FALSE(c->lookup(fixture::ask(empty, " \n\t ")).has_value());
  c->on_closed(fixture::answer(empty.id, {1}));
  EXPECT_EQ(c->stats().stores, 0);

  // Longer than the embedding window: exact path only, so a prompt that differs past the cut
  // does not hit by similarity.
  std::string doc(200, 'x');
  for (size_t i = 0; i < doc.size(); i += 7) doc[i] = ' ';
  f.teach(*c, doc + " Summarise this.", {7});
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), doc + " Translate this.")).has_value());
  auto again = c->lookup(fixture::ask(f.request(), doc + " Summarise this."));
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->exact);
  // A UTF-8 sequence at the cut is not split (no crash, no invalid text handed to the embedder).
  std::string accents;
  for (int i = 0; i < 40; ++i) accents += "\xC3\xA9";
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), accents)).has_value());
}

TEST(SemanticCache, SurvivesARestartAndRebuildsTheIndex) {
  fixture f;
  {
    auto c = f.open();
    f.teach(*c, "What is the capital of France?", {1, 2});
    f.teach(*c, "How many legs does a spider have?", {3, 4});
  }
  auto c = f.open();
  EXPECT_EQ(c->stats().entries, 2);
  auto exact = c->lookup(fixture::ask(f.request(), "How many legs does a spider have?"));
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(exact->tokens, (std::vector<int32_t>{3, 4}));
  auto similar = c->lookup(fixture::ask(f.request(), "what is the capital city of France"));
  ASSERT_TRUE(similar.has_value());
  EXPECT_FALSE(similar->exact);
  EXPECT_EQ(similar->tokens, (std::vector<int32_t>{1, 2}));
}

TEST(SemanticCache, EntriesExpireAfterTheTtl) {
  fixture f;
  f.cfg.ttl_s = 60;
  {
    auto c = f.open();
    f.teach(*c, "What is the capital of France?", {1});
    f.clock.now += 59'000;
    EXPECT_TRUE(c->lookup(fixture::ask(f.request(), "What is the capital of France?")).has_value());
    f.clock.now += 1'000;
    EXPECT_FALSE(c->lookup(fixture::ask(f.request(), "What is the capital of France?")).has_value());
    c->expire();
    EXPECT_EQ(c->stats().entries, 0);
    EXPECT_EQ(c->stats().expirations, 1);
    f.teach(*c, "How many legs does a spider have?", {2});
  }
  f.clock.now += 61'000;
  auto c = f.open();  // expired entries are dropped at start too
  EXPECT_EQ(c->stats().entries, 0);
}

TEST(SemanticCache, EvictsTheLeastRecentlyHitBeyondTheLimits) {
  fixture f;
  f.cfg.max_entries = 3;
  auto c = f.open();
  const std::vector<std::string> qs = {"first question about cats", "second question about dogs",
                                       "third question about birds", "fourth question about fish"};
  for (int i = 0; i < 3; ++i) {
    f.teach(*c, qs[static_cast<size_t>(i)], {i});
    f.clock.now += 1000;
  }
  ASSERT_TRUE(c->lookup(fixture::ask(f.request(), qs[0])).has_value());  // first is now the most recent
  f.clock.now += 1000;
  f.teach(*c, qs[3], {3});
  EXPECT_EQ(c->stats().entries, 3);
  EXPECT_EQ(c->stats().evictions, 1);
  EXPECT_TRUE(c->lookup(fixture::ask(f.request(), qs[0])).has_value());
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), qs[1])).has_value());
  EXPECT_TRUE(c->lookup(fixture::ask(f.request(), qs[2])).has_value());

  fixture g;
  g.cfg.max_bytes = 3000;  // each entry is ~1.1 KB (a 256-float embedding and a little more)
  auto d = g.open();
  for (int i = 0; i < 5; ++i) {
    g.teach(*d, qs[static_cast<size_t>(i % 4)] + " v" + std::to_string(i), {i});
    g.clock.now += 1000;
  }
  const auto st = d->stats();
  EXPECT_LE(st.bytes, 3000);
  EXPECT_EQ(st.entries, 2);
  EXPECT_EQ(st.evictions, 3);
}

TEST(SemanticCache, AnUnusableStoreDisablesTheCacheAndSaysWhy) {
  troupe::test::temp_dir dir("semcache-bad");
  std::ofstream(dir.str("not-a-dir")) << "x";
  semantic_cache_config cfg;
  cfg.path = dir.str("not-a-dir");
  semantic_cache c(cfg, std::make_unique<hashed_ngram_embedder>(64));
  EXPECT_FALSE(c.enabled());
  EXPECT_NE(c.status().find("disabled"), std::string::npos);
  EXPECT_NE(c.status().find(cfg.path), std::string::npos) << c.status();
  cache_query r = cache_query::from_prompt("hello");
  r.id = 1;
  EXPECT_FALSE(c.lookup(r).has_value());
  c.on_closed(fixture::answer(1, {1}));
  EXPECT_FALSE(c.stats().enabled);

  // A corrupt directory (CURRENT names a manifest that does not exist).
  {
    semantic_cache_config ok = cfg;
    ok.path = dir.str("corrupt");
    semantic_cache fine(ok, std::make_unique<hashed_ngram_embedder>(64));
    ASSERT_TRUE(fine.enabled()) << fine.status();
  }
  std::ofstream(dir.str("corrupt/CURRENT"), std::ios::trunc) << "MANIFEST-424242\n";
  cfg.path = dir.str("corrupt");
  semantic_cache corrupt(cfg, std::make_unique<hashed_ngram_embedder>(64));
  EXPECT_FALSE(corrupt.enabled());
  EXPECT_NE(corrupt.status().find("cannot open the cache store"), std::string::npos) << corrupt.status();

  semantic_cache_config off;
  off.enabled = false;
  semantic_cache none(off);
  EXPECT_FALSE(none.enabled());
  EXPECT_EQ(none.status(), "disabled in the config");
}

// A full disk (a small tmpfs, mounted here when the tests run as root): the write that would not
// fit turns the cache off with the reason in status() (what /health shows); lookups are misses
// from then on and nothing throws.
// Debian's librocksdb 7.8 is built with assertions, and a WAL write that hits ENOSPC aborts the
// process inside RocksDB (WritableFileWriter::AssertFalseAndGetStatusForPrevError) before put()
// can return its error: the cache checks the free space before writing (cache.min_free_disk_mib).
TEST(SemanticCache, AWriteErrorTurnsTheCacheOffAndSaysWhy) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs (a full disk) needs root";
  fixture f;
  const std::string mnt = f.dir.str("small");
  std::filesystem::create_directories(mnt);
  const std::string cmd = "mount -t tmpfs -o size=4m tmpfs " + mnt + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "cannot mount a tmpfs here (a container without the capability)";
  struct unmount {
    std::string at;
    ~unmount() { (void)std::system(("umount " + at).c_str()); }
  } guard{mnt};
  f.cfg.path = mnt + "/db";
  f.cfg.min_free_disk_mib = 1;  // of the 4 MiB
  auto c = f.open();
  ASSERT_TRUE(c->enabled()) << c->status();
  f.teach(*c, "What is the capital of France?", {1, 2});
  ASSERT_EQ(c->stats().stores, 1);
  // Fill the disk, then offer an answer too large for what is left.
  {
    std::ofstream fill(mnt + "/filler", std::ios::binary);
    const std::string block(64 * 1024, 'x');
    for (int i = 0; i < 64 && fill.write(block.data(), block.size()); ++i) fill.flush();
  }
  auto r = f.request();
  ASSERT_FALSE(c->lookup(fixture::ask(r, "How many legs does a spider have?")).has_value());
  c->on_closed(fixture::answer(r.id, std::vector<int32_t>(200000, 7)));
  EXPECT_FALSE(c->enabled());
  EXPECT_NE(c->status().find("disabled: the disk is nearly full"), std::string::npos) << c->status();
  EXPECT_NE(c->status().find("cache.min_free_disk_mib (1)"), std::string::npos) << c->status();
  const auto st = c->stats();
  EXPECT_FALSE(st.enabled);
  EXPECT_GE(st.store_failures, 1);
  EXPECT_EQ(st.stores, 1);
  // Off: every lookup is a miss, the stored answer included; closes are ignored.
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), "What is the capital of France?")).has_value());
  c->on_closed(fixture::answer(r.id, {1}));
  c.reset();  // closes without throwing on the full disk
}

TEST(SemanticCache, WithoutAWorkingEmbedderTheExactPathStillServes) {
  fixture f;
  f.cfg.embedder = "no-such-embedder";
  auto c = std::make_unique<semantic_cache>(f.cfg);  // from the registry: unknown name
  ASSERT_TRUE(c->enabled());
  EXPECT_FALSE(c->stats().semantic);
  EXPECT_NE(c->status().find("exact-match only"), std::string::npos);
  EXPECT_NE(c->status().find("hashed_ngrams"), std::string::npos) << c->status();  // lists the known names
  f.teach(*c, "What is the capital of France?", {1});
  EXPECT_TRUE(c->lookup(fixture::ask(f.request(), "What is the capital of France?")).has_value());
  EXPECT_FALSE(c->lookup(fixture::ask(f.request(), "what is the capital city of France")).has_value());

  fixture g;
  auto d = g.open(std::make_unique<failing_embedder>());
  g.teach(*d, "What is the capital of France?", {1});
  EXPECT_TRUE(d->lookup(fixture::ask(g.request(), "What is the capital of France?")).has_value());
  EXPECT_EQ(d->stats().embed_failures, 1);  // the first miss; the exact hit needed none
}

TEST(SemanticCache, AsyncInsertsAreWrittenBeforeShutdown) {
  fixture f;
  f.cfg.async_insert = true;
  {
    auto c = f.open();
    c->set_detokenizer([](const std::vector<int32_t>& t) { return "answer of " + std::to_string(t.size()) + " tokens"; });
    for (int i = 0; i < 20; ++i) f.teach(*c, "question number " + std::to_string(i), {i, i});
  }  // the destructor drains the queue
  f.cfg.async_insert = true;
  auto c = f.open();
  EXPECT_EQ(c->stats().entries, 20);
  auto hit = c->lookup(fixture::ask(f.request(), "question number 7"));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->text, "answer of 2 tokens");
  c->flush();
}

TEST(SemanticCache, TheSameQuestionAnsweredTwiceKeepsOneEntry) {
  fixture f;
  auto c = f.open();
  auto a = f.request(), b = f.request();
  ASSERT_FALSE(c->lookup(fixture::ask(a, "What is 2 + 2?")).has_value());
  ASSERT_FALSE(c->lookup(fixture::ask(b, "What is 2 + 2?")).has_value());
  c->on_closed(fixture::answer(a.id, {4}));
  c->on_closed(fixture::answer(b.id, {4, 4}));
  EXPECT_EQ(c->stats().entries, 1);
  EXPECT_EQ(c->lookup(fixture::ask(f.request(), "What is 2 + 2?"))->tokens, (std::vector<int32_t>{4, 4}));
}

TEST(Embedders, RegistryAndHashedNgrams) {
  auto& reg = embedder_registry();
  auto names = reg.names();
  EXPECT_NE(std::find(names.begin(), names.end(), "minilm"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "hashed_ngrams"), names.end());
  named_registry<embedder_factory> local{"embedder"};
  EXPECT_TRUE(local.add("x", [](const embedder_options&) -> troupe::result<std::unique_ptr<embedder>> {
    return std::unique_ptr<embedder>(new hashed_ngram_embedder(16));
  }).ok());
  EXPECT_FALSE(local.add("x", nullptr).ok());
  auto unknown = local.make("y");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().find("known: x"), std::string::npos);

  embedder_options o;
  o.dimension = 64;
  auto e = reg.make("hashed_ngrams", o);
  ASSERT_TRUE(e.ok());
  auto a = e.value()->embed("The same text");
  auto b = e.value()->embed("the  same text");
  ASSERT_EQ(a.value().size(), 64u);
  EXPECT_NEAR(dot(a.value().data(), b.value().data(), 64), 1.0f, 1e-6);  // case-insensitive, deterministic
  EXPECT_NEAR(dot(a.value().data(), a.value().data(), 64), 1.0f, 1e-5);
  EXPECT_TRUE(e.value()->embed("").ok());
}
