#include "model/cpu_backend.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "model/cpu_ops.hpp"
#include "model/huge_pages.hpp"
#include "model/quant.hpp"

namespace troupe::model {

void add_cpu_backend(named_registry<backend_factory>& r) { r.add("cpu", cpu_backend::create); }

namespace {

template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

kv_dtype kv_type_of(const backend_options& o) {
  return o.kv_q8 ? kv_dtype::q8 : o.kv_f32 ? kv_dtype::f32 : kv_dtype::f16;
}

// K and V of one token over all layers (q8: plus a float scale per row of head_dim values).
size_t kv_token_bytes(const hparams& hp, kv_dtype t) {
  const size_t row = static_cast<size_t>(hp.head_dim) * kv_elem_size(t) + (t == kv_dtype::q8 ? sizeof(float) : 0);
  return row * hp.n_head_kv * hp.n_layer * 2;
}

}  // namespace

result<std::unique_ptr<backend>> cpu_backend::create(std::shared_ptr<llama_model> m, const backend_options& o) {
  if (o.block_size <= 0 || o.block_size > 1024) return make_error("kv block size must be in 1..1024");
  const auto& hp = m->params();
  if (o.kv_f32 && o.kv_q8) return make_error("kv memory is either f32 or q8 (kv.f32, kv.q8), not both");
  if (o.kv_q8 && !kv_q8_supported(hp.head_dim))
    return make_error("q8 kv memory needs a CPU with AVX2 (or AVX-512) and a head size of 64 or 128 (this model's: " +
                      std::to_string(hp.head_dim) + ")");
  const size_t per_block = static_cast<size_t>(o.block_size) * kv_token_bytes(hp, kv_type_of(o));
  const auto n_blocks = static_cast<int64_t>(static_cast<size_t>(o.kv_bytes) / per_block);
  if (n_blocks < 1)
    return make_error("kv memory budget of " + std::to_string(o.kv_bytes) + " bytes holds no block of " +
                      std::to_string(per_block) + " bytes");
  if (n_blocks > (int64_t{1} << 30)) return make_error("kv memory budget too large");
  try {
    return std::unique_ptr<backend>(new cpu_backend(std::move(m), o, static_cast<int32_t>(n_blocks)));
  } catch (const std::bad_alloc&) {
    return make_error("cannot allocate the cpu backend's memory (K/V pool of " + std::to_string(n_blocks) +
                      " blocks, packed or converted weights)");
  } catch (const std::runtime_error& e) {
    return make_error(e.what());
  }
}

cpu_backend::cpu_backend(std::shared_ptr<llama_model> m, const backend_options& o, int32_t n_blocks)
    : model_(std::move(m)),
      pool_(o.n_threads),
      block_size_(o.block_size),
      n_blocks_(n_blocks),
      kv_type_(kv_type_of(o)) {
  const auto& hp = model_->params();
  const size_t rows = static_cast<size_t>(n_blocks_) * block_size_ * hp.n_head_kv * hp.n_layer;
  const size_t n = rows * hp.head_dim * kv_elem_size(kv_type_);
  // In 2 MiB pages, as the weights: a step's attention reads blocks anywhere in the pool, and in
  // 4 KiB pages nearly every block would cost a page walk (model/huge_pages.hpp).
  k_cache_ = alloc_huge_pages(n);
  v_cache_ = alloc_huge_pages(n);
  if (!k_cache_ || !v_cache_) throw std::bad_alloc();
  std::memset(k_cache_.get(), 0, n);
  std::memset(v_cache_.get(), 0, n);
  if (kv_type_ == kv_dtype::q8) {
    k_scale_.assign(rows, 0.0f);
    v_scale_.assign(rows, 0.0f);
  }
  layers_ = model_->layers();
  output_ = model_->output();
  // TROUPE_MATMUL_ORDER=fast|llama.cpp overrides the option (for comparisons and tools).
  matmul_order want = o.matmul;
  if (const char* env = std::getenv("TROUPE_MATMUL_ORDER"))
    if (auto parsed = parse_matmul_order(env)) want = *parsed;
  if (want == matmul_order::fast) pack_matrices();
  if (order_ != matmul_order::fast) {
    // Rows read as they are stored: matrices of a type without kernels as the model's Q8_0
    // copies (the fast order packed them from the file's bytes instead, and needs no copy).
    if (auto st = model_->prepare_matmul_weights(); !st) throw std::runtime_error(st.error());
    layers_ = model_->matmul_layers();
    output_ = model_->matmul_output();
  }
  k_by_column_ = kv_k_by_column(kv_type_, hp.head_dim, order_ == matmul_order::fast);
}

// Repacks every matrix of a type with fast kernels (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) into their
// layout (a copy of those weights) and lets the file's pages of them go. Others (F16, BF16, F32)
// keep llama.cpp's order: each matrix's arithmetic is fixed either way, so outputs stay
// deterministic and batch-invariant. order() reports fast when at least one matrix was packed
// (on a CPU without the kernels, none is).
void cpu_backend::pack_matrices() {
  // In the order a step reads them, in one allocation of 2 MiB pages: a step streams them from
  // first to last through as few pages as there can be (model/huge_pages.hpp).
  std::vector<weight_view*> ws;
  for (auto& L : layers_)
    for (weight_view* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) ws.push_back(w);
  ws.push_back(&output_);
  size_t total = 0;
  for (const weight_view* w : ws) total += packed_bytes(*w);
  if (total == 0 || !(packed_ = alloc_huge_pages(total))) {
    order_ = matmul_order::llama_cpp;
    return;
  }
  packed_size_ = total;
  const void* embd = model_->token_embd().data;
  uint8_t* at = packed_.get();
  for (weight_view* w : ws) {
    const size_t bytes = packed_bytes(*w);
    if (bytes == 0) continue;
    pack_weights_into(*w, at);
    w->packed = at;
    at += bytes;
    // Not read again, but for the token embeddings (which may be the output head).
    if (w->data != embd) model_->file().release_pages(w->data, static_cast<size_t>(w->n_out) * w->row_stride);
  }
  order_ = matmul_order::fast;
}

size_t cpu_backend::packed_huge_page_bytes() const { return huge_page_backed_bytes(packed_.get(), packed_size_); }

size_t cpu_backend::kv_bytes_per_token() const { return kv_token_bytes(model_->params(), kv_type_); }

kv_layer_view cpu_backend::layer_view(int layer) {
  const auto& hp = model_->params();
  kv_layer_view v;
  v.dtype = kv_type_;
  const size_t per_layer = static_cast<size_t>(n_blocks_) * block_size_ * hp.n_kv_dim() * v.elem_size();
  v.k = k_cache_.get() + per_layer * static_cast<size_t>(layer);
  v.v = v_cache_.get() + per_layer * static_cast<size_t>(layer);
  if (kv_type_ == kv_dtype::q8) {
    const size_t rows_per_layer = static_cast<size_t>(n_blocks_) * block_size_ * hp.n_head_kv;
    v.k_scale = k_scale_.data() + rows_per_layer * static_cast<size_t>(layer);
    v.v_scale = v_scale_.data() + rows_per_layer * static_cast<size_t>(layer);
  }
  v.n_kv_heads = hp.n_head_kv;
  v.head_dim = hp.head_dim;
  v.block_size = block_size_;
  v.k_by_column = k_by_column_;
  return v;
}

void cpu_backend::plan_attention(int64_t T, const std::vector<int32_t>& tok_pos, const kv_layer_view& kv) {
  const auto& hp = model_->params();
  const int group = hp.n_head / hp.n_head_kv;
  // Only the fast order splits (split_attention says no for llama.cpp's orders).
  const attention_order order = order_ == matmul_order::fast ? attention_order::fast : attention_order::single;
  attn_tasks_.clear();
  attn_splits_.clear();
  // Parts become tasks of their own only where the step has too few queries to keep the threads
  // evenly busy (decode of a few sequences); else each query's parts run in one task, one after
  // the other: the same arithmetic, without thousands of claims and hand-overs in a prompt chunk.
  const bool spread = T * hp.n_head_kv < 4 * pool_.size();
  int64_t n_parts = 0;
  for (int64_t t = 0; t < T; ++t) {
    const attention_split sp = split_attention(kv, order, tok_pos[static_cast<size_t>(t)] + 1);
    for (int g = 0; g < hp.n_head_kv; ++g) {
      if (sp.n_parts == 1) {
        attn_tasks_.push_back({static_cast<int32_t>(t), g, 0, -1});
        continue;
      }
      const auto split = static_cast<int32_t>(attn_splits_.size());
      attn_splits_.push_back({n_parts, sp});
      n_parts += sp.n_parts;
      if (!spread) {
        attn_tasks_.push_back({static_cast<int32_t>(t), g, -1, split});
        continue;
      }
      for (int p = 0; p < sp.n_parts; ++p) attn_tasks_.push_back({static_cast<int32_t>(t), g, p, split});
    }
  }
  grow(attn_parts_, static_cast<size_t>(n_parts * group * hp.head_dim));
  grow(attn_stats_, static_cast<size_t>(n_parts * 2 * group));
  if (attn_splits_.size() > attn_pending_size_) {
    attn_pending_size_ = attn_splits_.size();
    attn_pending_ = std::make_unique<std::atomic<int>[]>(attn_pending_size_);
  }
}

void cpu_backend::for_each_row(int64_t n, const std::function<void(int64_t i)>& fn) {
  if (n <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool_.run_chunks(n, fn);
}

result<batch_logits> cpu_backend::forward(const batch& b) {
  if (auto s = validate_batch(b, *this); !s) return make_error(s.error());
  const auto& hp = model_->params();
  const int64_t T = b.n_tokens();
  const int ne = hp.n_embd, nq = hp.n_q_dim(), nkv = hp.n_kv_dim(), nff = hp.n_ff, hd = hp.head_dim;
  const int half_rot = hp.n_rot / 2;
  batch_logits out;
  out.n_vocab = hp.n_vocab;
  if (T == 0) return out;

  // Token → (sequence, position) map for the whole step.
  std::vector<int32_t> tok_seq(static_cast<size_t>(T)), tok_pos(static_cast<size_t>(T));
  std::vector<int64_t> logit_rows;
  {
    int64_t t = 0;
    for (size_t si = 0; si < b.seqs.size(); ++si) {
      const auto& s = b.seqs[si];
      for (size_t j = 0; j < s.tokens.size(); ++j, ++t) {
        tok_seq[static_cast<size_t>(t)] = static_cast<int32_t>(si);
        tok_pos[static_cast<size_t>(t)] = s.n_past + static_cast<int32_t>(j);
      }
      if (s.want_logits)
        for (int64_t r = t - s.n_logits; r < t; ++r) {
          logit_rows.push_back(r);
          out.seq_ids.push_back(s.seq_id);
        }
    }
  }

  // Pure decode steps are profiled when asked (prompt chunks would mix another kind of step in):
  // one token per sequence, past its prompt (where the step says how long that is).
  step_profile* prof = profile_;
  for (const auto& s : b.seqs)
    if (prof && (s.tokens.size() != 1 || s.n_past < s.n_prompt)) prof = nullptr;
  phase_timer timer(prof);
  using ph = step_profile;
  if (prof) {
    ++prof->steps;
    prof->tokens += T;
  }

  grow(x_, T * ne);
  grow(xn_, T * ne);
  grow(q_, T * nq);
  grow(k_, T * nkv);
  grow(v_, T * nkv);
  grow(att_, T * nq);
  grow(tmp_, T * ne);
  grow(gate_, T * nff);
  grow(up_, T * nff);
  grow(rope_cos_, T * half_rot);
  grow(rope_sin_, T * half_rot);

  const auto& emb = model_->token_embd();
  {
    int64_t t = 0;
    for (const auto& s : b.seqs)
      for (auto id : s.tokens) {
        dequantize_row(emb.type, static_cast<const uint8_t*>(emb.data) + static_cast<size_t>(id) * emb.row_stride,
                       x_.data() + t * ne, ne);
        ++t;
      }
  }
  for (int64_t t = 0; t < T; ++t)
    rope_table(tok_pos[static_cast<size_t>(t)], hp.n_rot, hp.rope_freq_base, hp.rope_freq_scale,
               rope_cos_.data() + t * half_rot, rope_sin_.data() + t * half_rot, model_->rope_freq_factors());

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int group = hp.n_head / hp.n_head_kv;
  size_t max_ctx = 0;
  for (const auto& s : b.seqs) max_ctx = std::max(max_ctx, static_cast<size_t>(s.n_past) + s.tokens.size());

  // llama.cpp's norm (one chain of additions) in its order, a vectorised one in the fast order.
  const auto norm = order_ == matmul_order::fast ? rms_norm_fast : rms_norm;

  // Work done on each chunk of a matmul's output rows by the thread that computed it (see
  // row_epilogue), set per layer: biases, RoPE and K/V stores after Q/K/V (chunks of whole heads),
  // SwiGLU after gate/up, the residual adds after the output projection and down.
  const layer_weights* L = nullptr;
  kv_layer_view kv;
  // Row head h of Q|K|V laid end to end, for token t: its bias, RoPE (Q and K), its K/V store
  // (each token stores its own slot: no two tokens of a step share a position).
  auto finish_qkv_head = [&](int64_t h, int64_t t) {
    const auto& s = b.seqs[static_cast<size_t>(tok_seq[static_cast<size_t>(t)])];
    const int32_t pos = tok_pos[static_cast<size_t>(t)];
    const float* cos_t = rope_cos_.data() + t * half_rot;
    const float* sin_t = rope_sin_.data() + t * half_rot;
    if (h < hp.n_head) {
      float* q = q_.data() + t * nq + h * hd;
      if (hp.qkv_bias) add_inplace(q, L->bq + h * hd, hd);
      apply_rope(q, 1, hd, hp.n_rot, hp.rope, cos_t, sin_t);
    } else if (const int64_t g = h - hp.n_head; g < hp.n_head_kv) {
      float* k = k_.data() + t * nkv + g * hd;
      if (hp.qkv_bias) add_inplace(k, L->bk + g * hd, hd);
      apply_rope(k, 1, hd, hp.n_rot, hp.rope, cos_t, sin_t);
      kv_store_head(kv, s.block_table.data(), pos, static_cast<int>(g), k, nullptr);
    } else {
      const int64_t gv = g - hp.n_head_kv;
      float* v = v_.data() + t * nkv + gv * hd;
      if (hp.qkv_bias) add_inplace(v, L->bv + gv * hd, hd);
      kv_store_head(kv, s.block_table.data(), pos, static_cast<int>(gv), nullptr, v);
    }
  };
  const row_epilogue qkv_done{[&](int64_t r0, int64_t r1) {
                                assert(r0 % hd == 0 && r1 % hd == 0);  // whole heads (the alignment below)
                                for (int64_t h = r0 / hd; h < r1 / hd; ++h)
                                  for (int64_t t = 0; t < T; ++t) finish_qkv_head(h, t);
                              },
                              hd, false};
  const row_epilogue swiglu_done{[&](int64_t r0, int64_t r1) {
                                   for (int64_t t = 0; t < T; ++t)
                                     silu_mul(gate_.data() + t * nff + r0, up_.data() + t * nff + r0, r1 - r0);
                                 },
                                 16, true};
  // The norms before Q/K/V and gate/up, token by token inside their matmul's hand-off (row_prologue).
  const row_prologue attn_norm{
      [&](int64_t t) { norm(x_.data() + t * ne, L->attn_norm, xn_.data() + t * ne, ne, hp.rms_eps); }};
  const row_prologue ffn_norm{
      [&](int64_t t) { norm(x_.data() + t * ne, L->ffn_norm, xn_.data() + t * ne, ne, hp.rms_eps); }};
  const row_epilogue add_to_x{[&](int64_t r0, int64_t r1) {
                                for (int64_t t = 0; t < T; ++t)
                                  add_inplace(x_.data() + t * ne + r0, tmp_.data() + t * ne + r0, r1 - r0);
                              },
                              16, false};

  plan_attention(T, tok_pos, layer_view(0));
  for (int il = 0; il < hp.n_layer; ++il) {
    L = &layers_[static_cast<size_t>(il)];
    kv = layer_view(il);

    timer.lap(ph::other);
    {
      // Q, K and V read the same input: its norm and quantization run once, in one hand-off.
      const weight_view ws[3] = {L->wq, L->wk, L->wv};
      float* const ys[3] = {q_.data(), k_.data(), v_.data()};
      matmul_multi(ws, ys, 3, xn_.data(), T, pool_, &qkv_done, &attn_norm);
    }
    timer.lap(ph::qkv);
    // Attention: one task per (token, kv head), or per part of one (split_attention); each reads
    // only its own sequence's blocks. The task that finishes a split query's last part merges them.
    for (size_t i = 0; i < attn_splits_.size(); ++i) attn_pending_[i].store(attn_splits_[i].split.n_parts);
    // Tasks are claimed dynamically (a descheduled worker takes none on a busy machine); each
    // task uses the scratch of the thread that runs it.
    auto attend_task = [&](int64_t i) {
      thread_local std::vector<float> scratch;
      // Grown in steps of 4096 values: one more position per decode step must not reallocate.
      if (scratch.size() < max_ctx * static_cast<size_t>(group))
        scratch.resize((max_ctx * static_cast<size_t>(group) + 4095) / 4096 * 4096);
      const attention_task& task = attn_tasks_[static_cast<size_t>(i)];
      const int64_t t = task.t;
      const auto& s = b.seqs[static_cast<size_t>(tok_seq[static_cast<size_t>(t)])];
      const int32_t n_ctx = tok_pos[static_cast<size_t>(t)] + 1;
      if (task.split >= 0) {
        const auto& sp = attn_splits_[static_cast<size_t>(task.split)];
        const int p0 = task.part < 0 ? 0 : task.part, p1 = task.part < 0 ? sp.split.n_parts : task.part + 1;
        for (int p = p0; p < p1; ++p) {
          const int64_t part = sp.first_part + p;
          paged_attention_part(q_.data() + t * nq, kv, s.block_table.data(), n_ctx, task.g, group, scale, sp.split, p,
                               attn_parts_.data() + part * group * hd, attn_stats_.data() + part * 2 * group,
                               scratch.data());
        }
        if (attn_pending_[static_cast<size_t>(task.split)].fetch_sub(p1 - p0, std::memory_order_acq_rel) == p1 - p0)
          merge_attention_parts(attn_parts_.data() + sp.first_part * group * hd,
                                attn_stats_.data() + sp.first_part * 2 * group, sp.split.n_parts, group,
                                static_cast<int>(hd), att_.data() + t * nq + task.g * group * hd);
        return;
      }
      // llama.cpp sums the weighted values of a prompt batch in another order than those of a
      // decoded token; following it keeps the logits bit-identical (batch_sequence::n_prompt).
      const auto order = order_ == matmul_order::fast ? attention_order::fast
                         : s.n_prompt >= 2 && tok_pos[static_cast<size_t>(t)] < s.n_prompt ? attention_order::batch
                                                                                          : attention_order::single;
      paged_attention_group(q_.data() + t * nq, kv, s.block_table.data(), n_ctx, task.g, group, scale,
                            att_.data() + t * nq, scratch.data(), order);
    };
    // A prompt chunk has thousands of tasks: they are claimed a few at a time (a claim is an atomic
    // that both threads contend for), 16 claims per thread at least, single tasks in decode.
    const auto n_tasks = static_cast<int64_t>(attn_tasks_.size());
    const int64_t per_claim = std::max<int64_t>(1, n_tasks / (16 * pool_.size()));
    pool_.run_chunks((n_tasks + per_claim - 1) / per_claim, [&](int64_t c) {
      for (int64_t i = c * per_claim; i < std::min(n_tasks, (c + 1) * per_claim); ++i) attend_task(i);
    });

    timer.lap(ph::attention);
    matmul(L->wo, att_.data(), T, tmp_.data(), pool_, &add_to_x);
    timer.lap(ph::wo);

    {
      const weight_view ws[2] = {L->w_gate, L->w_up};
      float* const ys[2] = {gate_.data(), up_.data()};
      matmul_multi(ws, ys, 2, xn_.data(), T, pool_, &swiglu_done, &ffn_norm);
    }
    timer.lap(ph::gate_up);
    matmul(L->w_down, gate_.data(), T, tmp_.data(), pool_, &add_to_x);
    timer.lap(ph::down);
  }
  timer.lap(ph::other);

  // Output head only for the rows whose logits are wanted (each sequence's last n_logits tokens).
  // Each row's arithmetic is the same whatever the others are (the matmul is batch-invariant),
  // so a verified position's logits equal those of a one-token decode there.
  const auto n_out = static_cast<int64_t>(logit_rows.size());
  if (n_out == 0) return out;
  grow(out_rows_, n_out * ne);
  for (int64_t r = 0; r < n_out; ++r)
    norm(x_.data() + logit_rows[static_cast<size_t>(r)] * ne, model_->output_norm(), out_rows_.data() + r * ne, ne,
             hp.rms_eps);
  out.data.resize(static_cast<size_t>(n_out) * hp.n_vocab);
  matmul(output_, out_rows_.data(), n_out, out.data.data(), pool_);
  timer.lap(ph::head);
  return out;
}

}  // namespace troupe::model
