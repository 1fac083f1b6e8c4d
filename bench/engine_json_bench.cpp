#include "bench/engine_json_bench.hpp"

#include <string_view>
#include <thread>

#include "bench/step_breakdown_bench.hpp"
#include "model/matmul_amx.hpp"
#include "net/json_writer.hpp"

namespace troupe::bench::engine {

using namespace troupe::model;

namespace {

constexpr int k_engine_json_version = 1;

}  // namespace

const char* const engine_json_help =
    "--json FILE writes the run's figures as one JSON object: schema \"troupe.bench.engine\", schema_version 1; "
    "machine (cpu, logical_cpus, started_at, finished_at, load_average_start / _end: 1, 5, 15 min); model (id, path, "
    "layers, embd, vocab, weight_bytes); threads; matmul_isa; amx (available, line: the AMX path or why not); options "
    "(every test's size and count); ceiling (streaming read of the weights' bytes: bytes, gb_per_s, tokens_per_s); "
    "configurations[] (name, matmul_order, kv; tests prefill, decode, long_prefill, long_decode: tokens, depth, runs "
    "(tokens/s), median, llama_cpp, ratio, ceiling_percent for decodes (decode also ceiling_percent_paired_runs, ceiling_paired_gb_per_s: each run against a read just before and after it, and ceiling_percent_paired, their median); batched[]: batch, rounds, median, "
    "ratio_to_batch1 and its rounds, llama_cpp, ratio, step (decode step phase by phase in ms: phases[] of key, label, "
    "ms; outside_forward_ms, step_ms, steps, kv_bytes, kv_gb_per_s, kv_ceiling_percent); floors[]; kv_bytes_per_token, "
    "block_size, peak_kv); llama_cpp (available, note, prefill, decode, long_prefill, long_decode: tokens_per_s, "
    "stddev; batched[]: batch, tokens_per_s); quality (null with --eval-windows 0; text, n_ctx, windows, "
    "tokens_scored, ppl_reference, paths[]: name, mean_kl, p99_kl, max_kl, top1_agreement, ppl, ppl_ratio; notes[]; "
    "or error); peak_rss_mib. A figure not measured is null.";

std::string engine_json(const bench_options& o, const loaded_model& lm, int threads, const machine_state& m,
                        const read_ceiling& ceiling, const std::vector<troupe_figures>& runs, const llama_figures& llama,
                        const quality_figures* quality, long rss_kib) {
  const auto& hp = lm.weights->params();
  troupe::net::json_writer w;
  // A figure not measured (0) is null, not 0 tokens/s.
  auto figure = [&w](std::string_view k, double v) {
    w.key(k);
    if (v > 0) w.value(v);
    else w.null();
  };
  auto doubles = [&w](std::string_view k, const std::vector<double>& v) {
    w.key(k).begin_array();
    for (double x : v) w.value(x);
    w.end_array();
  };
  auto loads = [&w](std::string_view k, const std::array<double, 3>& l) {
    w.key(k).begin_array();
    for (double x : l) {
      if (x >= 0) w.value(x);
      else w.null();
    }
    w.end_array();
  };
  auto llama_batched = [&llama](int b) {
    for (auto [lb, lt] : llama.batched)
      if (lb == b) return lt;
    return 0.0;
  };
  w.begin_object();
  w.field("schema", "troupe.bench.engine").field("schema_version", int64_t{k_engine_json_version});
  w.key("machine").begin_object();
  w.field("cpu", m.cpu).field("logical_cpus", int64_t{std::thread::hardware_concurrency()});
  w.field("started_at", m.started_at).field("finished_at", m.finished_at);
  loads("load_average_start", m.load_start);
  loads("load_average_end", m.load_end);
  w.end_object();
  w.key("model").begin_object();
  w.field("id", lm.id).field("path", o.model).field("layers", int64_t{hp.n_layer}).field("embd", int64_t{hp.n_embd});
  w.field("vocab", int64_t{hp.n_vocab}).field("weight_bytes", static_cast<uint64_t>(lm.weights->weight_bytes()));
  w.end_object();
  w.field("threads", int64_t{threads}).field("matmul_isa", matmul_isa());
  w.key("amx").begin_object();
  w.field("available", amx_support().available).field("line", amx_path_line());
  w.end_object();
  w.key("options").begin_object();
  w.field("prefill_tokens", int64_t{o.prefill_tokens}).field("decode_tokens", int64_t{o.decode_tokens});
  w.field("long_tokens", int64_t{o.long_tokens}).field("batch_prompt", int64_t{o.batch_prompt});
  w.field("batch_gen", int64_t{o.batch_gen}).field("repeats", int64_t{o.repeats});
  w.field("batch_repeats", int64_t{o.batch_repeats}).field("block_size", int64_t{o.block_size});
  w.key("batches").begin_array();
  for (int b : o.batches) w.value(int64_t{b});
  w.end_array();
  w.field("temperature", static_cast<double>(o.sampling.temperature)).field("top_k", int64_t{o.sampling.top_k});
  w.field("top_p", static_cast<double>(o.sampling.top_p));
  w.end_object();
  w.key("ceiling");
  if (ceiling.bytes) {
    w.begin_object();
    w.field("bytes", static_cast<uint64_t>(ceiling.bytes)).field("threads", int64_t{ceiling.threads});
    w.field("gb_per_s", ceiling.gb_per_s).field("tokens_per_s", ceiling.tokens_per_s());
    w.end_object();
  } else {
    w.null();
  }

  w.key("configurations").begin_array();
  for (const auto& r : runs) {
    w.begin_object();
    w.field("name", r.name()).field("matmul_order", matmul_order_name(r.order)).field("kv", r.kv_q8 ? "q8" : "f16");
    // One single-sequence test: its runs, median, llama.cpp's figure and the ratio.
    auto test = [&](const char* key, int tokens, int depth, const std::vector<double>& each, double reference,
                    double ceiling_tps) {
      w.key(key);
      if (each.empty()) {
        w.null();
        return;
      }
      w.begin_object();
      w.field("tokens", int64_t{tokens}).field("depth", int64_t{depth});
      doubles("runs", each);
      w.field("median", median(each));
      figure("llama_cpp", reference);
      figure("ratio", reference > 0 ? median(each) / reference : 0.0);
      if (ceiling_tps >= 0) figure("ceiling_percent", ceiling_tps > 0 ? 100.0 * median(each) / ceiling_tps : 0.0);
      if (&each == &r.tg && !r.tg_ceiling_percent.empty()) {
        doubles("ceiling_percent_paired_runs", r.tg_ceiling_percent);
        doubles("ceiling_paired_gb_per_s", r.tg_ceiling_gb_per_s);
        figure("ceiling_percent_paired", median(r.tg_ceiling_percent));
        w.field("packed_bytes", static_cast<uint64_t>(r.packed_bytes))
            .field("packed_huge_page_bytes", static_cast<uint64_t>(r.packed_huge_bytes))
            .field("paired_read_huge_page_bytes", static_cast<uint64_t>(r.read_huge_bytes));
      }
      w.end_object();
    };
    test("prefill", o.prefill_tokens, 0, r.pp, llama.pp.tps, -1);
    test("decode", o.decode_tokens, 16, r.tg, llama.tg.tps, ceiling.tokens_per_s());
    test("long_prefill", o.long_tokens, 0, r.long_pp, llama.long_pp.tps, -1);
    test("long_decode", o.decode_tokens, o.long_tokens, r.long_tg, llama.long_tg.tps, long_ceiling_tps(ceiling, r, o));

    const auto bs = breakdowns(r, o);
    w.key("batched").begin_array();
    for (size_t i = 0; i < r.agg.size(); ++i) {
      const int b = r.agg[i].first;
      w.begin_object();
      w.field("batch", int64_t{b});
      doubles("rounds", i < r.agg_rounds.size() ? r.agg_rounds[i] : std::vector<double>{});
      w.field("median", r.agg[i].second);
      const std::vector<double>* each = nullptr;
      for (const auto& [bb, e] : r.to_b1)
        if (bb == b) each = &e;
      w.key("ratio_to_batch1");
      if (each && !each->empty()) w.value(median(*each));
      else w.null();
      doubles("ratio_to_batch1_rounds", each ? *each : std::vector<double>{});
      figure("llama_cpp", llama_batched(b));
      figure("ratio", llama_batched(b) > 0 ? r.agg[i].second / llama_batched(b) : 0.0);
      w.key("step");
      const step_breakdown* sb = nullptr;
      for (const auto& x : bs)
        if (x.batch == b) sb = &x;
      if (!sb) {
        w.null();
      } else {
        w.begin_object();
        w.field("steps", int64_t{sb->steps}).field("step_ms", sb->step_ms);
        w.key("phases").begin_array();
        for (size_t p = 0; p < step_profile::n_phases; ++p) {
          w.begin_object();
          w.field("key", phase_keys[p]).field("label", step_profile::names[p]).field("ms", sb->ms[p]);
          w.end_object();
        }
        w.end_array();
        w.field("outside_forward_ms", sb->outside_ms).field("kv_bytes", sb->kv_bytes);
        figure("kv_gb_per_s", sb->kv_gb_per_s());
        figure("kv_ceiling_percent", ceiling.gb_per_s > 0 ? 100.0 * sb->kv_gb_per_s() / ceiling.gb_per_s : 0.0);
        w.end_object();
      }
      w.end_object();
    }
    w.end_array();
    w.key("floors").begin_array();
    for (const auto& c : floors_of(r, llama)) {
      w.begin_object();
      w.field("what", c.what).field("floor", c.floor);
      w.key("value");
      if (c.measured) w.value(c.value);
      else w.null();
      w.key("met");
      if (c.measured) w.value(c.met());
      else w.null();
      w.end_object();
    }
    w.end_array();
    w.field("kv_bytes_per_token", static_cast<uint64_t>(r.kv_bytes_per_token)).field("block_size", int64_t{r.block_size});
    w.key("peak_kv").begin_object();
    w.field("blocks_used", int64_t{r.peak.blocks_used}).field("blocks_total", int64_t{r.peak.blocks_total});
    w.field("slots_wasted", static_cast<int64_t>(r.peak.slots_wasted));
    w.end_object();
    w.end_object();
  }
  w.end_array();

  w.key("llama_cpp").begin_object();
  const bool ran = !llama.batched.empty() || llama.pp.tps > 0 || llama.tg.tps > 0;
  w.field("available", ran);
  w.key("note");
  if (llama.note.empty()) w.null();
  else w.value(llama.note);
  auto ltest = [&](const char* key, const llama_test& t) {
    w.key(key);
    if (t.tps <= 0) {
      w.null();
      return;
    }
    w.begin_object();
    w.field("tokens_per_s", t.tps).field("stddev", t.sd);
    w.end_object();
  };
  ltest("prefill", llama.pp);
  ltest("decode", llama.tg);
  ltest("long_prefill", llama.long_pp);
  ltest("long_decode", llama.long_tg);
  w.key("batched").begin_array();
  for (auto [b, tps] : llama.batched) {
    w.begin_object();
    w.field("batch", int64_t{b}).field("tokens_per_s", tps);
    w.end_object();
  }
  w.end_array();
  w.end_object();
  if (quality) write_quality(w, *quality);
  else w.key("quality").null();
  w.field("peak_rss_mib", static_cast<double>(rss_kib) / 1024.0);
  w.end_object();
  return w.take();
}

}  // namespace troupe::bench::engine
