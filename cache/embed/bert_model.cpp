#include "cache/embed/bert_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <simdjson.h>

#include "model/quant.hpp"

namespace troupe::cache {

namespace {

void layer_norm(float* x, const float* w, const float* b, int n, float eps) {
  double mean = 0;
  for (int i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  double var = 0;
  for (int i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  const float inv = static_cast<float>(1.0 / std::sqrt(var + eps));
  const float m = static_cast<float>(mean);
  for (int i = 0; i < n; ++i) x[i] = (x[i] - m) * inv * w[i] + b[i];
}

// BERT's "gelu" is the exact one, x * Phi(x), not the tanh approximation.
inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }

void add_bias_rows(float* y, const float* b, int n_rows, int n) {
  for (int r = 0; r < n_rows; ++r)
    for (int i = 0; i < n; ++i) y[static_cast<size_t>(r) * n + i] += b[i];
}

size_t dtype_bytes(model::ggml_type t) { return t == model::ggml_type::f32 ? 4 : 2; }

float to_f32(model::ggml_type t, const uint8_t* p) {
  if (t == model::ggml_type::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (t == model::ggml_type::bf16) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return model::fp16_to_fp32(h);
}

}  // namespace

result<bert_config> parse_bert_config(const std::string& json_text) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (auto err = parser.parse(json_text).get(root)) return make_error(std::string("config.json is not valid JSON: ") + simdjson::error_message(err));
  bert_config c;
  auto get_int = [&](const char* key, int& out) -> status {
    int64_t v;
    if (root[key].get(v) || v <= 0 || v > (1 << 24)) return make_error(std::string("config.json: '") + key + "' is missing or not a positive integer");
    out = static_cast<int>(v);
    return {};
  };
  for (auto [key, out] : {std::pair<const char*, int*>{"vocab_size", &c.vocab_size}, {"hidden_size", &c.hidden},
                          {"num_hidden_layers", &c.n_layers}, {"num_attention_heads", &c.n_heads},
                          {"intermediate_size", &c.intermediate}, {"max_position_embeddings", &c.max_positions},
                          {"type_vocab_size", &c.type_vocab_size}}) {
    if (auto s = get_int(key, *out); !s) return make_error(s.error());
  }
  double eps = 1e-12;
  if (root["layer_norm_eps"].error() == simdjson::SUCCESS && root["layer_norm_eps"].get(eps))
    return make_error("config.json: 'layer_norm_eps' is not a number");
  c.layer_norm_eps = static_cast<float>(eps);
  std::string_view s;
  if (!root["model_type"].get(s) && s != "bert") return make_error("config.json: model_type '" + std::string(s) + "' is not 'bert'");
  if (!root["hidden_act"].get(s) && s != "gelu") return make_error("config.json: hidden_act '" + std::string(s) + "' is not supported (only 'gelu')");
  if (!root["position_embedding_type"].get(s) && s != "absolute")
    return make_error("config.json: position_embedding_type '" + std::string(s) + "' is not supported (only 'absolute')");
  if (c.hidden % c.n_heads != 0) return make_error("config.json: hidden_size is not a multiple of num_attention_heads");
  return c;
}

result<std::unique_ptr<bert_model>> bert_model::load(std::shared_ptr<const safetensors_file> file, const bert_config& cfg,
                                                     model::ggml_type matrix_type) {
  std::unique_ptr<bert_model> m(new bert_model());
  m->cfg_ = cfg;
  m->file_ = file;
  // Checkpoints saved from BertForXxx prefix every name with "bert.".
  const std::string prefix = file->tensor("embeddings.word_embeddings.weight") ? "" : "bert.";

  auto find = [&](const std::string& name, std::vector<int64_t> shape) -> result<const safetensor*> {
    const safetensor* t = file->tensor(prefix + name);
    if (!t) return make_error("tensor '" + prefix + name + "' is missing");
    if (t->shape != shape) {
      std::string want, got;
      for (auto d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      for (auto d : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      return make_error("tensor '" + t->name + "' has shape [" + got + "], the config says [" + want + "]");
    }
    model::ggml_type ty;
    if (!t->ggml_float_type(ty)) return make_error("tensor '" + t->name + "' has dtype " + t->dtype + " (F32, F16 or BF16 expected)");
    return t;
  };
  // Vectors and embedding tables are read as F32 rows: used in place when they are, else copied.
  auto floats = [&](const std::string& name, std::vector<int64_t> shape) -> result<const float*> {
    auto t = find(name, shape);
    if (!t) return make_error(t.error());
    model::ggml_type ty;
    t.value()->ggml_float_type(ty);
    const uint8_t* p = t.value()->data;
    if (ty == model::ggml_type::f32 && reinterpret_cast<uintptr_t>(p) % alignof(float) == 0)
      return reinterpret_cast<const float*>(p);
    const int64_t n = t.value()->elements();
    std::vector<uint8_t> buf(static_cast<size_t>(n) * sizeof(float));
    auto* f = reinterpret_cast<float*>(buf.data());
    for (int64_t i = 0; i < n; ++i) f[i] = to_f32(ty, p + i * dtype_bytes(ty));
    m->owned_.push_back(std::move(buf));
    return reinterpret_cast<const float*>(m->owned_.back().data());
  };
  // Matrices stay in their dtype. Q, K and V are fused into one [3H, H] matrix (one matmul).
  auto matrix = [&](const std::vector<std::string>& names, int64_t n_out_each, int64_t n_in) -> result<model::weight_view> {
    std::vector<const safetensor*> parts;
    for (const auto& n : names) {
      auto t = find(n, {n_out_each, n_in});
      if (!t) return make_error(t.error());
      parts.push_back(t.value());
    }
    model::weight_view w;
    parts[0]->ggml_float_type(w.type);
    for (auto* p : parts) {
      model::ggml_type ty;
      p->ggml_float_type(ty);
      if (ty != w.type) return make_error("tensors '" + parts[0]->name + "' and '" + p->name + "' differ in dtype");
    }
    w.n_in = n_in;
    w.n_out = n_out_each * static_cast<int64_t>(parts.size());
    w.row_stride = static_cast<size_t>(n_in) * dtype_bytes(w.type);
    if (matrix_type != model::ggml_type::f32 && w.type == model::ggml_type::f32) {
      // Converted row by row with the engine's quantizers.
      const size_t rb = model::row_bytes(matrix_type, n_in);
      std::vector<uint8_t> buf(static_cast<size_t>(w.n_out) * rb);
      std::vector<float> row(static_cast<size_t>(n_in));
      size_t r = 0;
      for (auto* p : parts)
        for (int64_t i = 0; i < n_out_each; ++i, ++r) {
          std::memcpy(row.data(), p->data + static_cast<size_t>(i * n_in) * 4, static_cast<size_t>(n_in) * 4);
          model::quantize_row(matrix_type, row.data(), buf.data() + r * rb, n_in);
        }
      w.type = matrix_type;
      w.row_stride = rb;
      m->owned_.push_back(std::move(buf));
      w.data = m->owned_.back().data();
      return w;
    }
    const bool aligned = reinterpret_cast<uintptr_t>(parts[0]->data) % dtype_bytes(w.type) == 0;
    if (parts.size() == 1 && aligned) {
      w.data = parts[0]->data;
      return w;
    }
    std::vector<uint8_t> buf;
    for (auto* p : parts) buf.insert(buf.end(), p->data, p->data + p->bytes);
    m->owned_.push_back(std::move(buf));
    w.data = m->owned_.back().data();
    return w;
  };
  auto vector_concat = [&](const std::vector<std::string>& names, int64_t n_each) -> result<const float*> {
    std::vector<uint8_t> buf;
    for (const auto& n : names) {
      auto v = floats(n, {n_each});
      if (!v) return make_error(v.error());
      auto* b = reinterpret_cast<const uint8_t*>(v.value());
      buf.insert(buf.end(), b, b + n_each * sizeof(float));
    }
    m->owned_.push_back(std::move(buf));
    return reinterpret_cast<const float*>(m->owned_.back().data());
  };

  const int64_t H = cfg.hidden, I = cfg.intermediate;
  // Keeps the first error; the lookups after it still run but change nothing that is returned.
  std::string err;
  auto take = [&err](auto r, auto& out) {
    if (!r) {
      if (err.empty()) err = r.error();
      return;
    }
    out = r.value();
  };

  take(floats("embeddings.word_embeddings.weight", {cfg.vocab_size, H}), m->word_);
  take(floats("embeddings.position_embeddings.weight", {cfg.max_positions, H}), m->pos_);
  take(floats("embeddings.token_type_embeddings.weight", {cfg.type_vocab_size, H}), m->type_);
  take(floats("embeddings.LayerNorm.weight", {H}), m->emb_ln_w_);
  take(floats("embeddings.LayerNorm.bias", {H}), m->emb_ln_b_);
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    layer L{};
    take(matrix({p + "attention.self.query.weight", p + "attention.self.key.weight",
                p + "attention.self.value.weight"}, H, H), L.qkv);
    take(vector_concat({p + "attention.self.query.bias", p + "attention.self.key.bias",
                       p + "attention.self.value.bias"}, H), L.qkv_b);
    take(matrix({p + "attention.output.dense.weight"}, H, H), L.attn_out);
    take(floats(p + "attention.output.dense.bias", {H}), L.attn_out_b);
    take(floats(p + "attention.output.LayerNorm.weight", {H}), L.ln1_w);
    take(floats(p + "attention.output.LayerNorm.bias", {H}), L.ln1_b);
    take(matrix({p + "intermediate.dense.weight"}, I, H), L.ffn_in);
    take(floats(p + "intermediate.dense.bias", {I}), L.ffn_in_b);
    take(matrix({p + "output.dense.weight"}, H, I), L.ffn_out);
    take(floats(p + "output.dense.bias", {H}), L.ffn_out_b);
    take(floats(p + "output.LayerNorm.weight", {H}), L.ln2_w);
    take(floats(p + "output.LayerNorm.bias", {H}), L.ln2_b);
    m->layers_.push_back(L);
  }
  if (!err.empty()) return make_error(err);
  return m;
}

// Per head, both products go through the engine's matmul: scores = (scale * Q_h) K_h^T with K_h
// read in place (its rows are strided inside the fused QKV output), then P V_h with V_h
// transposed into a contiguous matrix. A plain loop here took a third of a 256-token forward.
void bert_model::attention(const float* qkv, int n_tok, float* ctx, model::thread_pool& pool) {
  const int H = cfg_.hidden, n_heads = cfg_.n_heads, d = H / n_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const size_t n = static_cast<size_t>(n_tok), stride = static_cast<size_t>(3 * H);
  q_head_.resize(n * d);
  v_head_t_.resize(static_cast<size_t>(d) * n);
  scores_.resize(n * n);
  out_head_.resize(n * d);
  for (int h = 0; h < n_heads; ++h) {
    const size_t off = static_cast<size_t>(h) * d;
    for (size_t i = 0; i < n; ++i)
      for (int e = 0; e < d; ++e) q_head_[i * d + e] = qkv[i * stride + off + e] * scale;
    model::weight_view k;
    k.type = model::ggml_type::f32;
    k.data = qkv + H + off;
    k.n_in = d;
    k.n_out = n_tok;
    k.row_stride = stride * sizeof(float);
    model::matmul(k, q_head_.data(), n_tok, scores_.data(), pool);
    for (size_t i = 0; i < n; ++i) {
      float* p = scores_.data() + i * n;
      const float mx = *std::max_element(p, p + n);
      float sum = 0;
      for (size_t j = 0; j < n; ++j) sum += (p[j] = std::exp(p[j] - mx));
      const float inv = 1.0f / sum;
      for (size_t j = 0; j < n; ++j) p[j] *= inv;
    }
    for (size_t j = 0; j < n; ++j)
      for (int e = 0; e < d; ++e) v_head_t_[static_cast<size_t>(e) * n + j] = qkv[j * stride + 2 * H + off + e];
    model::weight_view v;
    v.type = model::ggml_type::f32;
    v.data = v_head_t_.data();
    v.n_in = n_tok;
    v.n_out = d;
    v.row_stride = n * sizeof(float);
    model::matmul(v, scores_.data(), n_tok, out_head_.data(), pool);
    for (size_t i = 0; i < n; ++i)
      std::copy(out_head_.begin() + static_cast<std::ptrdiff_t>(i * d), out_head_.begin() + static_cast<std::ptrdiff_t>((i + 1) * d),
                ctx + i * H + off);
  }
}

status bert_model::forward(const int32_t* ids, int n_tok, std::vector<float>& out, model::thread_pool& pool) {
  const int H = cfg_.hidden, I = cfg_.intermediate;
  if (n_tok < 1 || n_tok > cfg_.max_positions)
    return make_error("sequence of " + std::to_string(n_tok) + " tokens (1.." + std::to_string(cfg_.max_positions) + " allowed)");
  for (int t = 0; t < n_tok; ++t)
    if (ids[t] < 0 || ids[t] >= cfg_.vocab_size) return make_error("token id " + std::to_string(ids[t]) + " is outside the vocabulary");
  const size_t n = static_cast<size_t>(n_tok);
  out.assign(n * H, 0.0f);
  qkv_.resize(n * 3 * H);
  ctx_.resize(n * H);
  tmp_.resize(n * H);
  ffn_.resize(n * I);

  for (int t = 0; t < n_tok; ++t) {
    float* x = out.data() + static_cast<size_t>(t) * H;
    const float* w = word_ + static_cast<size_t>(ids[t]) * H;
    const float* p = pos_ + static_cast<size_t>(t) * H;
    for (int i = 0; i < H; ++i) x[i] = w[i] + p[i] + type_[i];  // token type 0: one segment
    layer_norm(x, emb_ln_w_, emb_ln_b_, H, cfg_.layer_norm_eps);
  }
  for (const layer& L : layers_) {
    model::matmul(L.qkv, out.data(), n_tok, qkv_.data(), pool);
    add_bias_rows(qkv_.data(), L.qkv_b, n_tok, 3 * H);
    attention(qkv_.data(), n_tok, ctx_.data(), pool);
    model::matmul(L.attn_out, ctx_.data(), n_tok, tmp_.data(), pool);
    for (size_t r = 0; r < n; ++r) {
      float* x = out.data() + r * H;
      const float* a = tmp_.data() + r * H;
      for (int i = 0; i < H; ++i) x[i] += a[i] + L.attn_out_b[i];
      layer_norm(x, L.ln1_w, L.ln1_b, H, cfg_.layer_norm_eps);
    }
    model::matmul(L.ffn_in, out.data(), n_tok, ffn_.data(), pool);
    for (size_t r = 0; r < n; ++r) {
      float* f = ffn_.data() + r * I;
      for (int i = 0; i < I; ++i) f[i] = gelu_erf(f[i] + L.ffn_in_b[i]);
    }
    model::matmul(L.ffn_out, ffn_.data(), n_tok, tmp_.data(), pool);
    for (size_t r = 0; r < n; ++r) {
      float* x = out.data() + r * H;
      const float* a = tmp_.data() + r * H;
      for (int i = 0; i < H; ++i) x[i] += a[i] + L.ffn_out_b[i];
      layer_norm(x, L.ln2_w, L.ln2_b, H, cfg_.layer_norm_eps);
    }
  }
  return {};
}

}  // namespace troupe::cache
