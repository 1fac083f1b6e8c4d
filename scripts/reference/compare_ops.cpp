// Applies Troupe's CPU ops to llama.cpp's own intermediate tensors (dumped by llama_tensors.cpp)
// and compares each result with llama.cpp's output of the same op: which ops are bit-identical to
// ggml and which differ (and by how much) when both start from the same input. A debugging tool,
// not part of any build; compile it against a Release build of the engine (one command line):
//   g++ -std=c++17 -O2 -mavx2 -mfma -mf16c -I . -o /tmp/compare_ops scripts/reference/compare_ops.cpp
//     build/libtroupe_engine.a -lpcre2-8 -lpthread
//
//   compare_ops MODEL DUMP_DIR [N_LAYERS_SHOWN [DECODE_POS]]
//       DUMP_DIR from `llama_tensors MODEL DUMP_DIR 2 IDS...` (one prompt in one batch), or, with
//       DECODE_POS = number of ids - 1, from TROUPE_DUMP_DECODE=1 llama_tensors (the last id decoded
//       alone at that position; attention then reads llama.cpp's K/V cache dumps). Prints, per
//       layer and op, the share of bit-identical values and the largest difference. The Q
//       projection is also recomputed by a scalar emulation of ggml's Q4_1 x Q8_1 order (AVX2
//       quantize_row_q8_1, ggml_vec_dot_q4_1_q8_1), which shows whether a matmul difference is
//       only its float summation order.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model/cpu_ops.hpp"
#include "model/loaded_model.hpp"
#include "model/matmul.hpp"
#include "model/paged_attention.hpp"
#include "model/quant.hpp"
#include "model/thread_pool.hpp"

using namespace troupe::model;

namespace {

struct tensor {
  int ne[4] = {0, 0, 0, 0};
  std::vector<float> d;
  int rows() const { return ne[1] * ne[2] * ne[3]; }
};

std::string g_dir;

tensor load(const std::string& name) {
  tensor t;
  FILE* f = fopen((g_dir + "/" + name + ".bin").c_str(), "rb");
  if (!f) {
    fprintf(stderr, "compare_ops: no %s in %s\n", name.c_str(), g_dir.c_str());
    exit(1);
  }
  if (fread(t.ne, 4, 4, f) != 4) exit(1);
  t.d.resize(static_cast<size_t>(t.ne[0]) * t.rows());
  if (fread(t.d.data(), 4, t.d.size(), f) != t.d.size()) exit(1);
  fclose(f);
  return t;
}

// Compares the last n values of got (n = ref's size) with ref: the last layer keeps only the
// last token's row in llama.cpp's graph.
void report(int layer, const char* what, const float* got, size_t got_n, const tensor& ref) {
  const size_t n = ref.d.size();
  const float* a = got + (got_n - n);
  double worst = 0, peak = 0;
  size_t same = 0;
  for (size_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - ref.d[i]);
    worst = std::max(worst, diff);
    peak = std::max(peak, static_cast<double>(std::fabs(ref.d[i])));
    same += diff == 0;
  }
  printf("layer %2d %-14s identical %6.2f%%  max|diff| %.3g  (max|value| %.3g, ratio %.2g)\n", layer, what,
         100.0 * same / n, worst, peak, peak > 0 ? worst / peak : 0.0);
}

// ggml's AVX2 quantize_row_q8_1 + ggml_vec_dot_q4_1_q8_1, scalar, for one row of activations.
void ggml_order_q4_1(const weight_view& w, const float* x, float* y) {
  const int n = static_cast<int>(w.n_in), nb = n / 32;
  std::vector<int8_t> q(static_cast<size_t>(n));
  std::vector<float> ad(static_cast<size_t>(nb)), as(static_cast<size_t>(nb));
  for (int b = 0; b < nb; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.f, id = amax != 0 ? 127.f / amax : 0.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += q[b * 32 + i] = static_cast<int8_t>(std::nearbyint(x[b * 32 + i] * id));
    ad[b] = round_fp16(d);
    as[b] = round_fp16(d * static_cast<float>(sum));
  }
  for (int64_t o = 0; o < w.n_out; ++o) {
    const auto* row = static_cast<const uint8_t*>(w.data) + o * w.row_stride;
    float acc[8] = {0}, mins = 0;
    for (int b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * 20;  // fp16 d, fp16 m, 16 bytes of nibbles
      uint16_t dh, mh;
      std::memcpy(&dh, blk, 2);
      std::memcpy(&mh, blk + 2, 2);
      mins = mins + fp16_to_fp32(mh) * as[b];
      const float dd = fp16_to_fp32(dh) * ad[b];
      for (int l = 0; l < 8; ++l) {  // one int32 lane = 4 consecutive products
        int s = 0;
        for (int e = 4 * l; e < 4 * l + 4; ++e)
          s += (e < 16 ? (blk[4 + e] & 15) : (blk[4 + e - 16] >> 4)) * q[b * 32 + e];
        acc[l] = std::fma(dd, static_cast<float>(s), acc[l]);
      }
    }
    float r[4];
    for (int i = 0; i < 4; ++i) r[i] = acc[i + 4] + acc[i];
    y[o] = ((r[0] + r[2]) + (r[1] + r[3])) + mins;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: compare_ops MODEL DUMP_DIR [N_LAYERS_SHOWN]\n");
    return 1;
  }
  g_dir = argv[2];
  auto lm = loaded_model::load(argv[1]);
  if (!lm) {
    fprintf(stderr, "compare_ops: %s\n", lm.error().c_str());
    return 1;
  }
  const auto m = lm.value()->weights;
  const auto& hp = m->params();
  const int shown = argc > 3 ? atoi(argv[3]) : hp.n_layer;
  const int decode_pos = argc > 4 ? atoi(argv[4]) : 0;  // 0: a prompt batch from position 0
  thread_pool pool(2);

  const tensor embd = load("embd");
  const int N = embd.ne[1], P = decode_pos + N, ne = hp.n_embd, hd = hp.head_dim, half = hp.n_rot / 2;
  const int nq = hp.n_head * hd, nkv = hp.n_head_kv * hd, group = hp.n_head / hp.n_head_kv;
  std::vector<float> cs(static_cast<size_t>(N) * half), sn(cs.size());
  for (int t = 0; t < N; ++t)
    rope_table(decode_pos + t, hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale, cs.data() + t * half,
               sn.data() + t * half);
  std::vector<float> y(static_cast<size_t>(N) * std::max(hp.n_ff, hp.n_vocab));
  std::vector<float> kmem(static_cast<size_t>(P) * nkv), vmem(kmem.size());
  const std::vector<int32_t> table(1, 0);

  for (int il = 0; il < hp.n_layer; ++il) {
    if (il >= shown && il != hp.n_layer - 1) continue;
    const auto& L = m->layers()[static_cast<size_t>(il)];
    const std::string s = std::to_string(il);
    const tensor x = il == 0 ? embd : load("l_out-" + std::to_string(il - 1));

    for (int t = 0; t < N; ++t) rms_norm(x.d.data() + t * ne, L.attn_norm, y.data() + t * ne, ne, hp.rms_eps);
    report(il, "attn_norm", y.data(), size_t(N) * ne, load("attn_norm-" + s));
    const tensor an = load("attn_norm-" + s);
    matmul(L.wq, an.d.data(), N, y.data(), pool);
    report(il, "Q matmul", y.data(), size_t(N) * nq, load("Qcur-" + s));
    if (L.wq.type == ggml_type::q4_1) {
      for (int t = 0; t < N; ++t) ggml_order_q4_1(L.wq, an.d.data() + t * ne, y.data() + t * nq);
      report(il, "Q ggml-order", y.data(), size_t(N) * nq, load("Qcur-" + s));
    }
    matmul(L.wk, an.d.data(), N, y.data(), pool);
    report(il, "K matmul", y.data(), size_t(N) * nkv, load("Kcur-" + s));
    matmul(L.wv, an.d.data(), N, y.data(), pool);
    report(il, "V matmul", y.data(), size_t(N) * nkv, load("Vcur-" + s));

    tensor q = load("Qcur-" + s), k = load("Kcur-" + s);
    for (int t = 0; t < N; ++t) {
      apply_rope(q.d.data() + t * nq, hp.n_head, hd, hp.n_rot, hp.rope, cs.data() + t * half, sn.data() + t * half);
      apply_rope(k.d.data() + t * nkv, hp.n_head_kv, hd, hp.n_rot, hp.rope, cs.data() + t * half, sn.data() + t * half);
    }
    report(il, "Q rope", q.d.data(), q.d.size(), load("Qcur-" + s + ".2"));
    report(il, "K rope", k.d.data(), k.d.size(), load("Kcur-" + s + ".2"));

    // attention from llama.cpp's roped Q and K/V: the prompt in the tinyBLAS order, a decoded
    // token in ggml_vec_dot_f32's
    const tensor qr = load("Qcur-" + s + ".2");
    kv_layer_view kv;
    kv.k = kmem.data();
    kv.v = vmem.data();
    kv.dtype = kv_dtype::f32;
    kv.n_kv_heads = hp.n_head_kv;
    kv.head_dim = hd;
    kv.block_size = P;
    if (decode_pos == 0) {
      const tensor kr = load("Kcur-" + s + ".2"), v = load("Vcur-" + s);
      for (int t = 0; t < N; ++t) kv_store(kv, table.data(), t, kr.d.data() + t * nkv, v.d.data() + t * nkv);
    } else {
      // K cache: a row of n_kv_dim per cell; V cache transposed: a row of cells per dimension
      const tensor kc = load("cache_k_l" + s + " (view)"), vc = load("cache_v_l" + s + " (reshaped) (view)");
      const int cells = kc.ne[1];
      std::vector<float> vrow(static_cast<size_t>(nkv));
      for (int p = 0; p < P; ++p) {
        for (int e = 0; e < nkv; ++e) vrow[static_cast<size_t>(e)] = vc.d[static_cast<size_t>(e) * cells + p];
        kv_store(kv, table.data(), p, kc.d.data() + static_cast<size_t>(p) * nkv, vrow.data());
      }
    }
    std::vector<float> scratch(static_cast<size_t>(P) * group), att(static_cast<size_t>(N) * nq);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int t = 0; t < N; ++t)
      for (int g = 0; g < hp.n_head_kv; ++g)
        paged_attention_group(qr.d.data() + t * nq, kv, table.data(), decode_pos + t + 1, g, group, scale,
                              att.data() + t * nq, scratch.data(),
                              N > 1 ? attention_order::batch : attention_order::single);
    const tensor ko = load("kqv_out-" + s);
    report(il, "attention", att.data(), att.size(), ko);

    matmul(L.wo, ko.d.data(), ko.rows(), y.data(), pool);
    report(il, "wo matmul", y.data(), size_t(ko.rows()) * ne, load("attn_out-" + s));
    const tensor ao = load("attn_out-" + s);
    const tensor fi = load("ffn_inp-" + s);
    const int R = fi.rows();  // N, or 1 in the last layer (llama.cpp keeps only the last token)
    const auto tail = static_cast<int64_t>(R) * ne;
    std::vector<float> res(x.d.end() - tail, x.d.end());
    add_inplace(res.data(), ao.d.data() + (ao.d.size() - tail), tail);
    report(il, "residual", res.data(), res.size(), fi);

    for (int t = 0; t < R; ++t) rms_norm(fi.d.data() + t * ne, L.ffn_norm, y.data() + t * ne, ne, hp.rms_eps);
    report(il, "ffn_norm", y.data(), size_t(R) * ne, load("ffn_norm-" + s));
    const tensor fn = load("ffn_norm-" + s);
    matmul(L.w_gate, fn.d.data(), R, y.data(), pool);
    report(il, "gate matmul", y.data(), size_t(R) * hp.n_ff, load("ffn_gate-" + s));
    matmul(L.w_up, fn.d.data(), R, y.data(), pool);
    report(il, "up matmul", y.data(), size_t(R) * hp.n_ff, load("ffn_up-" + s));
    tensor gate = load("ffn_gate-" + s);
    const tensor up = load("ffn_up-" + s);
    for (int64_t r = 0; r < R; ++r)  // row by row, as the backend does
      silu_mul(gate.d.data() + r * hp.n_ff, up.d.data() + r * hp.n_ff, hp.n_ff);
    report(il, "silu_mul", gate.d.data(), gate.d.size(), load("ffn_swiglu-" + s));
    const tensor sw = load("ffn_swiglu-" + s);
    matmul(L.w_down, sw.d.data(), R, y.data(), pool);
    report(il, "down matmul", y.data(), size_t(R) * ne, load("ffn_out-" + s));
  }
  const tensor last = load("l_out-" + std::to_string(hp.n_layer - 1));
  rms_norm(last.d.data() + last.d.size() - ne, m->output_norm(), y.data(), ne, hp.rms_eps);
  report(hp.n_layer, "output_norm", y.data(), size_t(ne), load("result_norm"));
  const tensor rn = load("result_norm");
  matmul(m->output(), rn.d.data(), 1, y.data(), pool);
  report(hp.n_layer, "output matmul", y.data(), size_t(hp.n_vocab), load("result_output"));
  return 0;
}
