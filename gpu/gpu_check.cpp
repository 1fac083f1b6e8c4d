// The GPU check (scripts/gpu-check.sh): on synthetic Llama models at SmolLM2-135M's shape and at
// a ~1B Llama shape, generated here (no model file, no tokenizer: prompts are token ids), it
// reports
//   parity: cuda vs cpu logits on 20 prompts (max abs difference) and greedy tokens for 32
//           positions (equal on at least 19 of 20 prompts);
//   speed:  decode tokens/s at batch 1, 16, 64, 256 with CUDA graphs on and off, prefill
//           tokens/s, and the step time split between device work and host work.
// Exit status 0 when parity holds for every shape, 1 when it does not, 2 on an error.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cuda_backend.hpp"
#include "gpu/device_info.hpp"
#include "gpu/kernel_math.hpp"
#include "model/backend.hpp"
#include "model/gguf_writer.hpp"
#include "model/quant.hpp"

using namespace troupe;
using model::batch;
using model::batch_sequence;

namespace {

struct shape {
  const char* name;
  int n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
};

// SmolLM2-135M and a Llama-3.2-1B-like shape.
const shape k_shapes[] = {
    {"smollm2-135m", 576, 30, 9, 3, 1536, 49152, 2048},
    {"llama-1b", 2048, 16, 32, 8, 8192, 128256, 2048},
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// f16 weights from a counter-based generator, rows filled by all cores; uniform with the
// variance of N(0, scale^2): what matters for parity is the same weights on both backends.
std::vector<uint8_t> random_f16(int64_t n_in, int64_t n_out, float scale, uint64_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(n_in * n_out) * 2);
  auto* h = reinterpret_cast<uint16_t*>(out.data());
  const float a = scale * std::sqrt(3.0f);
  const unsigned n_thr = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> th;
  const int64_t n = n_in * n_out;
  for (unsigned w = 0; w < n_thr; ++w)
    th.emplace_back([=] {
      for (int64_t i = n * w / n_thr; i < n * (w + 1) / n_thr; ++i) {
        const double u = gpu::math::uniform01(seed, i);
        h[i] = model::fp32_to_fp16(static_cast<float>((2.0 * u - 1.0) * a));
      }
    });
  for (auto& t : th) t.join();
  return out;
}

std::vector<uint8_t> norm_weights(int64_t n, uint64_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float v = 0.8f + 0.4f * static_cast<float>(gpu::math::uniform01(seed, i));
    std::memcpy(out.data() + i * 4, &v, 4);
  }
  return out;
}

std::shared_ptr<model::llama_model> make_model(const shape& s) {
  model::gguf_writer w;
  const std::string a = "llama";
  w.set_string("general.architecture", a);
  w.set_string("general.name", std::string("synthetic-") + s.name);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_f32(a + ".rope.freq_base", 10000.0f);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  const int hd = s.n_embd / s.n_head, kv = s.n_head_kv * hd;
  const float s_in = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const auto f16 = model::ggml_type::f16, f32 = model::ggml_type::f32;
  uint64_t seed = 1000;
  w.add_tensor("token_embd.weight", f16, {s.n_embd, s.n_vocab}, random_f16(s.n_embd, s.n_vocab, 1.0f, ++seed));
  w.add_tensor("output_norm.weight", f32, {s.n_embd}, norm_weights(s.n_embd, ++seed));
  w.add_tensor("output.weight", f16, {s.n_embd, s.n_vocab}, random_f16(s.n_embd, s.n_vocab, s_in, ++seed));
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    w.add_tensor(b + "attn_norm.weight", f32, {s.n_embd}, norm_weights(s.n_embd, ++seed));
    w.add_tensor(b + "attn_q.weight", f16, {s.n_embd, s.n_embd}, random_f16(s.n_embd, s.n_embd, s_in, ++seed));
    w.add_tensor(b + "attn_k.weight", f16, {s.n_embd, kv}, random_f16(s.n_embd, kv, s_in, ++seed));
    w.add_tensor(b + "attn_v.weight", f16, {s.n_embd, kv}, random_f16(s.n_embd, kv, s_in, ++seed));
    w.add_tensor(b + "attn_output.weight", f16, {s.n_embd, s.n_embd}, random_f16(s.n_embd, s.n_embd, s_in, ++seed));
    w.add_tensor(b + "ffn_norm.weight", f32, {s.n_embd}, norm_weights(s.n_embd, ++seed));
    w.add_tensor(b + "ffn_gate.weight", f16, {s.n_embd, s.n_ff}, random_f16(s.n_embd, s.n_ff, s_in, ++seed));
    w.add_tensor(b + "ffn_up.weight", f16, {s.n_embd, s.n_ff}, random_f16(s.n_embd, s.n_ff, s_in, ++seed));
    w.add_tensor(b + "ffn_down.weight", f16, {s.n_ff, s.n_embd},
                 random_f16(s.n_ff, s.n_embd, 1.0f / std::sqrt(static_cast<float>(s.n_ff)), ++seed));
  }
  auto f = model::gguf_file::from_bytes(w.to_bytes(), std::string("synthetic-") + s.name);
  if (!f) throw std::runtime_error(f.error());
  auto m = model::llama_model::load(f.value());
  if (!m) throw std::runtime_error(m.error());
  return m.value();
}

int32_t argmax(const float* l, int n) { return static_cast<int32_t>(std::max_element(l, l + n) - l); }

// Sequences with consecutive block ranges: sequence i owns blocks [i * per, (i + 1) * per).
struct seq_set {
  std::vector<batch_sequence> seqs;
  seq_set(int n, int blocks_per_seq) {
    for (int i = 0; i < n; ++i) {
      batch_sequence s;
      s.seq_id = static_cast<uint64_t>(i);
      for (int b = 0; b < blocks_per_seq; ++b) s.block_table.push_back(i * blocks_per_seq + b);
      seqs.push_back(s);
    }
  }
};

struct parity_result {
  float max_abs_prefill = 0.0f;  // over the prompts' last-token logits
  float max_abs_decode = 0.0f;   // over decode steps while both backends agree on the tokens so far
  int prompts_equal = 0;
};

// Runs the 20 prompts and 32 greedy positions on one backend; records logits and tokens.
struct run_trace {
  std::vector<std::vector<float>> logits;       // [step][prompt * n_vocab]; step 0 is the prefill
  std::vector<std::vector<int32_t>> tokens;     // [prompt][32]
};

result<run_trace> run_prompts(model::backend& be, const std::vector<std::vector<int32_t>>& prompts, int n_gen) {
  const int n = static_cast<int>(prompts.size());
  const int bs = be.block_size();
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  seq_set set(n, static_cast<int>((longest + static_cast<size_t>(n_gen) + static_cast<size_t>(bs) - 1) / bs));
  run_trace tr;
  tr.tokens.assign(static_cast<size_t>(n), {});
  std::vector<int32_t> n_past(static_cast<size_t>(n), 0);
  for (int step = 0; step <= n_gen; ++step) {
    batch b;
    for (int i = 0; i < n; ++i) {
      auto s = set.seqs[static_cast<size_t>(i)];
      s.n_past = n_past[static_cast<size_t>(i)];
      s.tokens = step == 0 ? prompts[static_cast<size_t>(i)] : std::vector<int32_t>{tr.tokens[static_cast<size_t>(i)].back()};
      b.seqs.push_back(std::move(s));
    }
    auto r = be.forward(b);
    if (!r) return make_error(be.name() + ": " + r.error());
    if (step == n_gen) break;
    for (int i = 0; i < n; ++i) {
      n_past[static_cast<size_t>(i)] += static_cast<int32_t>(b.seqs[static_cast<size_t>(i)].tokens.size());
      tr.tokens[static_cast<size_t>(i)].push_back(argmax(r->row(static_cast<size_t>(i)), r->n_vocab));
    }
    tr.logits.push_back(std::move(r->data));
  }
  return tr;
}

result<parity_result> check_parity(const std::shared_ptr<model::llama_model>& m, const std::string& against) {
  const int n_prompts = 20, n_gen = 32;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n_prompts; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(4 + (i * 7) % 60));
    for (size_t j = 0; j < p.size(); ++j)
      p[j] = static_cast<int32_t>(gpu::math::uniform01(77 + i, static_cast<int64_t>(j)) * m->params().n_vocab);
    prompts.push_back(std::move(p));
  }
  model::backend_options o;
  o.kv_bytes = int64_t{1} << 30;
  auto cpu = model::make_backend("cpu", m, o);
  if (!cpu) return make_error(cpu.error());
  auto cuda = model::make_backend(against, m, o);
  if (!cuda) return make_error(cuda.error());
  double t0 = now_s();
  auto a = run_prompts(*cpu.value(), prompts, n_gen);
  if (!a) return make_error(a.error());
  std::printf("    cpu reference: %.1f s\n", now_s() - t0);
  t0 = now_s();
  auto g = run_prompts(*cuda.value(), prompts, n_gen);
  if (!g) return make_error(g.error());
  std::printf("    %s: %.1f s\n", against.c_str(), now_s() - t0);

  parity_result pr;
  const int nv = m->params().n_vocab;
  for (size_t step = 0; step < a->logits.size(); ++step)
    for (int i = 0; i < n_prompts; ++i) {
      // Compare logits only while the two greedy continuations are still the same text.
      bool same_so_far = true;
      for (size_t k = 0; k < step; ++k)
        same_so_far = same_so_far && a->tokens[static_cast<size_t>(i)][k] == g->tokens[static_cast<size_t>(i)][k];
      if (!same_so_far) continue;
      float mx = 0.0f;
      for (int v = 0; v < nv; ++v)
        mx = std::max(mx, std::fabs(a->logits[step][static_cast<size_t>(i) * nv + v] -
                                    g->logits[step][static_cast<size_t>(i) * nv + v]));
      (step == 0 ? pr.max_abs_prefill : pr.max_abs_decode) =
          std::max(step == 0 ? pr.max_abs_prefill : pr.max_abs_decode, mx);
    }
  for (int i = 0; i < n_prompts; ++i) pr.prompts_equal += a->tokens[static_cast<size_t>(i)] == g->tokens[static_cast<size_t>(i)];
  return pr;
}

struct speed_result {
  double tok_s = 0.0, device_ms = 0.0, wall_ms = 0.0;
  int graph_steps = 0;  // timed steps that replayed a graph
};

// Decode throughput at batch size B: prompts of 32 tokens prefilled in chunks of 16 sequences,
// then 4 warm-up steps (graph capture happens there) and n_steps timed steps.
result<speed_result> decode_speed(gpu::cuda_backend& be, int B, bool graphs, int n_steps) {
  be.set_graphs(graphs);
  const int prompt = 32, bs = be.block_size();
  const int per = (prompt + 4 + n_steps + bs - 1) / bs + 1;
  if (B * per > be.n_blocks()) return make_error("kv memory too small for batch " + std::to_string(B));
  seq_set set(B, per);
  for (int s0 = 0; s0 < B; s0 += 16) {
    batch b;
    for (int i = s0; i < std::min(B, s0 + 16); ++i) {
      auto s = set.seqs[static_cast<size_t>(i)];
      s.tokens.resize(prompt);
      for (int j = 0; j < prompt; ++j) s.tokens[static_cast<size_t>(j)] = (i * 31 + j * 7) % be.params().n_vocab;
      b.seqs.push_back(std::move(s));
    }
    if (auto r = be.forward(b); !r) return make_error(r.error());
  }
  speed_result sr;
  double t0 = 0.0;
  for (int step = 0; step < 4 + n_steps; ++step) {
    if (step == 4) t0 = now_s();
    batch b;
    for (int i = 0; i < B; ++i) {
      auto s = set.seqs[static_cast<size_t>(i)];
      s.n_past = prompt + step;
      s.tokens = {(i + step) % be.params().n_vocab};
      b.seqs.push_back(std::move(s));
    }
    if (auto r = be.forward(b); !r) return make_error(r.error());
    if (step >= 4) {
      sr.device_ms += be.last_timing().device_ms;
      sr.wall_ms += be.last_timing().wall_ms;
      sr.graph_steps += be.last_timing().graph ? 1 : 0;
    }
  }
  const double dt = now_s() - t0;
  sr.tok_s = static_cast<double>(B) * n_steps / dt;
  sr.device_ms /= n_steps;
  sr.wall_ms /= n_steps;
  return sr;
}

result<double> prefill_speed(gpu::cuda_backend& be, int n_seqs, int len) {
  const int bs = be.block_size();
  seq_set set(n_seqs, (len + bs - 1) / bs);
  batch b;
  for (int i = 0; i < n_seqs; ++i) {
    auto s = set.seqs[static_cast<size_t>(i)];
    s.tokens.resize(static_cast<size_t>(len));
    for (int j = 0; j < len; ++j) s.tokens[static_cast<size_t>(j)] = (i * 131 + j * 17) % be.params().n_vocab;
    b.seqs.push_back(std::move(s));
  }
  if (auto r = be.forward(b); !r) return make_error(r.error());  // warm-up (allocates scratch)
  const double t0 = now_s();
  const int reps = 3;
  for (int k = 0; k < reps; ++k)
    if (auto r = be.forward(b); !r) return make_error(r.error());
  return static_cast<double>(n_seqs) * len * reps / (now_s() - t0);
}

}  // namespace

int main(int argc, char** argv) {
  bool want_small = true, want_big = true, parity_only = false;
  // --against cpu: compares cpu with itself, with no device; checks this harness on any machine.
  std::string against = "cuda";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small-only") want_big = false;
    else if (a == "--big-only") want_small = false;
    else if (a == "--parity-only") parity_only = true;
    else if (a == "--against" && i + 1 < argc) against = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--small-only | --big-only] [--parity-only] [--against cpu]\n", argv[0]);
      return 2;
    }
  }
  if (auto s = gpu::add_cuda_backend(model::backend_registry()); !s) {
    std::fprintf(stderr, "%s\n", s.error().c_str());
    return 2;
  }
  const auto dev = gpu::query_devices();
  std::printf("devices: %s\n", dev.summary.c_str());
  if (dev.count == 0 && against == "cuda") return 2;
  if (against != "cuda") parity_only = true;

  bool parity_ok = true;
  for (const auto& s : k_shapes) {
    if ((&s == &k_shapes[0] && !want_small) || (&s == &k_shapes[1] && !want_big)) continue;
    std::printf("== %s: n_embd %d, layers %d, heads %d/%d, n_ff %d, vocab %d (f16 weights)\n", s.name, s.n_embd,
                s.n_layer, s.n_head, s.n_head_kv, s.n_ff, s.n_vocab);
    double t0 = now_s();
    std::shared_ptr<model::llama_model> m;
    try {
      m = make_model(s);
    } catch (const std::exception& e) {
      std::printf("  error building the model: %s\n", e.what());
      return 2;
    }
    std::printf("  generated in %.1f s (%.2f GB)\n", now_s() - t0, static_cast<double>(m->weight_bytes()) / 1e9);

    auto pr = check_parity(m, against);
    if (!pr) {
      std::printf("  parity: error: %s\n", pr.error().c_str());
      return 2;
    }
    const bool ok = pr->prompts_equal >= 19;
    parity_ok = parity_ok && ok;
    std::printf("  parity: max |%s - cpu| logits: prefill %.4g, decode %.4g; greedy 32 positions equal on %d/20 "
                "prompts: %s\n",
                against.c_str(), pr->max_abs_prefill, pr->max_abs_decode, pr->prompts_equal, ok ? "PASS" : "FAIL");
    if (parity_only) continue;

    model::backend_options o;
    o.kv_bytes = int64_t{8} << 30;
    gpu::cuda_options co;
    auto be = gpu::cuda_backend::create(m, o, co);
    if (!be) {
      std::printf("  speed: error: %s\n", be.error().c_str());
      return 2;
    }
    double tps1[2] = {0, 0}, tps64 = 0;
    for (int B : {1, 16, 64, 256}) {
      for (bool g : {true, false}) {
        auto r = decode_speed(*be.value(), B, g, 32);
        if (!r) {
          std::printf("  decode batch %d graphs %s: error: %s\n", B, g ? "on" : "off", r.error().c_str());
          return 2;
        }
        if (B == 1) tps1[g ? 1 : 0] = r->tok_s;
        if (B == 64 && g) tps64 = r->tok_s;
        std::printf("  decode batch %3d graphs %-3s: %9.1f tok/s  step %.3f ms (device %.3f ms, host %.3f ms)%s\n", B,
                    g ? "on" : "off", r->tok_s, r->wall_ms, r->device_ms, std::max(0.0, r->wall_ms - r->device_ms),
                    g && r->graph_steps < 32 ? " [not every step replayed a graph]" : "");
        if (g && !be.value()->graph_error().empty()) std::printf("  graphs off: %s\n", be.value()->graph_error().c_str());
      }
    }
    if (tps1[0] > 0) std::printf("  graphs vs eager at batch 1: %.2fx (target >= 1.2x)\n", tps1[1] / tps1[0]);
    if (tps1[1] > 0) std::printf("  batch 64 vs batch 1, graphs on: %.1fx (target >= 20x)\n", tps64 / tps1[1]);
    auto pf = prefill_speed(*be.value(), 8, 512);
    if (!pf) {
      std::printf("  prefill: error: %s\n", pf.error().c_str());
      return 2;
    }
    std::printf("  prefill 8 x 512 tokens: %.0f tok/s\n", pf.value());
  }
  std::printf("parity overall: %s\n", parity_ok ? "PASS" : "FAIL");
  return parity_ok ? 0 : 1;
}
