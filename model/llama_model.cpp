#include "model/llama_model.hpp"

#include <cmath>
#include <cstdio>

#include "model/weight_conversion.hpp"

namespace troupe::model {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

class tensor_loader {
 public:
  explicit tensor_loader(const gguf_file& f) : f_(f) {}
  const std::string& error() const { return error_; }
  bool failed() const { return !error_.empty(); }

  // A matrix of n_out rows of n_in elements; any supported type (load converts those the matmul
  // kernels lack afterwards).
  weight_view matrix(const std::string& name, int64_t n_in, int64_t n_out, bool required = true) {
    weight_view w;
    const auto* t = lookup(name, required);
    if (!t) return w;
    if (t->dims.size() != 2 || t->dims[0] != n_in || t->dims[1] != n_out) {
      fail("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected [" +
           std::to_string(n_in) + ", " + std::to_string(n_out) + "]");
      return w;
    }
    w.type = t->type;
    w.data = t->data;
    w.n_in = n_in;
    w.n_out = n_out;
    w.row_stride = row_bytes(t->type, n_in);
    return w;
  }

  // A vector of n floats (norm weights, biases): F32 only, as llama.cpp writes them.
  const float* vec(const std::string& name, int64_t n, bool required = true) {
    const auto* t = lookup(name, required);
    if (!t) return nullptr;
    if (t->elements() != n) {
      fail("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected [" + std::to_string(n) + "]");
      return nullptr;
    }
    if (t->type != ggml_type::f32) {
      fail("tensor '" + name + "' has type " + type_name(static_cast<uint32_t>(t->type)) + ", expected F32");
      return nullptr;
    }
    if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) {
      fail("tensor '" + name + "' data is misaligned");
      return nullptr;
    }
    return reinterpret_cast<const float*>(t->data);
  }

  bool has(const std::string& name) const { return f_.tensor(name) != nullptr; }

 private:
  const gguf_tensor* lookup(const std::string& name, bool required) {
    if (failed()) return nullptr;
    const auto* t = f_.tensor(name);
    if (!t && required) fail("missing tensor '" + name + "'");
    return t;
  }
  void fail(std::string msg) {
    if (error_.empty()) error_ = std::move(msg);
  }
  const gguf_file& f_;
  std::string error_;
};

result<int64_t> positive(const gguf_file& f, const std::string& key) {
  auto v = f.get_int(key);
  if (!v) return v;
  if (v.value() <= 0 || v.value() > (int64_t{1} << 24))
    return make_error("metadata key '" + key + "' has invalid value " + std::to_string(v.value()));
  return v;
}

// An optional number: absent gives `dflt`; present, it must be a finite number (inf loaded and
// generated nothing).
result<double> finite_or(const gguf_file& f, const std::string& key, double dflt) {
  auto v = f.get_float(key, dflt);
  if (v && !std::isfinite(v.value())) return make_error("metadata key '" + key + "' is not finite");
  return v;
}

// Rotary scaling as llama.cpp reads it: the factor from rope.scaling.factor, else the older
// rope.scale_linear, 0 meaning none (1); rope.scaling.type linear when not given, or none.
// Others (yarn, longrope, ...) change the rotation in ways this engine does not compute: refused
// by name, not run wrong.
result<double> rope_scale_linear(const gguf_file& f, const std::string& p) {
  const std::string key = f.has(p + "rope.scaling.factor") ? p + "rope.scaling.factor" : p + "rope.scale_linear";
  auto factor = finite_or(f, key, 1.0);
  if (!factor) return factor;
  if (factor.value() == 0.0) factor = 1.0;
  if (!(factor.value() > 0.0 && factor.value() < 1e30))
    return make_error("metadata key '" + key + "' has invalid value " + std::to_string(factor.value()) +
                      " (a positive factor)");
  if (!f.has(p + "rope.scaling.type")) return factor;
  auto type = f.get_string(p + "rope.scaling.type");
  if (!type) return make_error(type.error());
  if (type.value() != "none" && type.value() != "linear")
    return make_error("metadata key '" + p + "rope.scaling.type' is '" + type.value() +
                      "': this engine computes rope scaling 'none' and 'linear' only");
  return factor;
}

}  // namespace

result<std::shared_ptr<llama_model>> llama_model::load(const std::string& path) {
  auto f = gguf_file::open(path);
  if (!f) return make_error(f.error());
  return load(f.value());
}

result<std::shared_ptr<llama_model>> llama_model::load(std::shared_ptr<gguf_file> file) {
  auto m = std::make_shared<llama_model>();
  m->file_ = file;
  const gguf_file& f = *file;
  auto& hp = m->hp_;

  auto arch = f.get_string("general.architecture");
  if (!arch) return make_error(f.path() + ": " + arch.error());
  hp.arch = arch.value();
  const auto a = architecture_registry().find(hp.arch);
  if (!a)
    return make_error(f.path() + ": unsupported architecture '" + hp.arch + "' (supported: " +
                      join(architecture_registry().names()) + ")");
  hp.rope = a->rope;
  hp.qkv_bias = a->qkv_bias;
  hp.name = f.get_string_or("general.name", hp.arch);
  const std::string p = hp.arch + ".";

  for (auto [key, dst] : {std::pair<const char*, int*>{"embedding_length", &hp.n_embd},
                          {"block_count", &hp.n_layer},
                          {"attention.head_count", &hp.n_head},
                          {"feed_forward_length", &hp.n_ff},
                          {"context_length", &hp.n_ctx_train}}) {
    auto v = positive(f, p + key);
    if (!v) return make_error(f.path() + ": " + v.error());
    *dst = static_cast<int>(v.value());
  }
  // Read as 64-bit and range-checked before narrowing (2^32 + 3 was read as 3).
  const auto head_count_kv = f.get_int(p + "attention.head_count_kv", hp.n_head);
  if (!head_count_kv) return make_error(f.path() + ": " + head_count_kv.error());
  if (head_count_kv.value() <= 0 || head_count_kv.value() > hp.n_head || hp.n_head % head_count_kv.value() != 0)
    return make_error(f.path() + ": attention.head_count_kv (" + std::to_string(head_count_kv.value()) +
                      ") must divide attention.head_count (" + std::to_string(hp.n_head) + ")");
  hp.n_head_kv = static_cast<int>(head_count_kv.value());
  if (hp.n_embd % hp.n_head != 0)
    return make_error(f.path() + ": embedding_length is not a multiple of attention.head_count");
  // Read as 64-bit and range-checked before narrowing: 2^32 would otherwise become 0.
  const auto key_length = f.get_int(p + "attention.key_length", hp.n_embd / hp.n_head);
  if (!key_length) return make_error(f.path() + ": " + key_length.error());
  const int64_t head_dim = key_length.value();
  if (head_dim <= 0 || head_dim > 4096 || head_dim % 2 != 0)
    return make_error(f.path() + ": metadata key '" + p + "attention.key_length' has invalid value " +
                      std::to_string(head_dim) + " (an even head size, 2..4096)");
  hp.head_dim = static_cast<int>(head_dim);
  // V heads of another size than K's (MLA-style models) are not what this engine computes.
  const auto value_length = f.get_int(p + "attention.value_length", head_dim);
  if (!value_length) return make_error(f.path() + ": " + value_length.error());
  if (value_length.value() != head_dim)
    return make_error(f.path() + ": metadata key '" + p + "attention.value_length' is " +
                      std::to_string(value_length.value()) + ", not the key length " + std::to_string(head_dim) +
                      ": V heads of another size than K's are not supported");
  // 0 would rotate nothing (no positions at all); more than the head has no dimensions to rotate.
  const auto rope_dims = f.get_int(p + "rope.dimension_count", hp.head_dim);
  if (!rope_dims) return make_error(f.path() + ": " + rope_dims.error());
  const int64_t n_rot = rope_dims.value();
  if (n_rot <= 0 || n_rot > hp.head_dim || n_rot % 2 != 0)
    return make_error(f.path() + ": metadata key '" + p + "rope.dimension_count' has invalid value " +
                      std::to_string(n_rot) + " (an even count, 2..the head size " + std::to_string(hp.head_dim) + ")");
  hp.n_rot = static_cast<int>(n_rot);
  // Numbers that must be finite and positive (a string there was read as the default; inf
  // loaded and generated nothing).
  const auto freq_base = finite_or(f, p + "rope.freq_base", 10000.0);
  const auto scale_linear = rope_scale_linear(f, p);
  const auto rms_eps = finite_or(f, p + "attention.layer_norm_rms_epsilon", 1e-5);
  for (const auto* v : {&freq_base, &scale_linear, &rms_eps})
    if (!*v) return make_error(f.path() + ": " + v->error());
  if (!(freq_base.value() > 0.0 && freq_base.value() < 1e30))
    return make_error(f.path() + ": metadata key '" + p + "rope.freq_base' has invalid value " +
                      std::to_string(freq_base.value()) + " (a positive base)");
  if (!(rms_eps.value() > 0.0 && rms_eps.value() < 1.0))
    return make_error(f.path() + ": metadata key '" + p + "attention.layer_norm_rms_epsilon' has invalid value " +
                      std::to_string(rms_eps.value()) + " (in (0, 1))");
  hp.rope_freq_base = static_cast<float>(freq_base.value());
  hp.rope_freq_scale = static_cast<float>(1.0 / scale_linear.value());
  hp.rms_eps = static_cast<float>(rms_eps.value());

  tensor_loader tl(f);
  const auto* emb = f.tensor("token_embd.weight");
  if (!emb) return make_error(f.path() + ": missing tensor 'token_embd.weight'");
  if (emb->dims.size() != 2) return make_error(f.path() + ": tensor 'token_embd.weight' must be 2-D");
  hp.n_vocab = static_cast<int>(emb->dims[1]);
  // The vocabulary's tokens are the embedding's rows: a file where they differ would embed ids
  // past its rows (an executor fault per request) or sample ids no token stands for.
  if (const auto* tokens = f.find("tokenizer.ggml.tokens"); tokens && tokens->type == gguf_value_type::array &&
                                                            static_cast<int64_t>(tokens->as_array().size()) != emb->dims[1])
    return make_error(f.path() + ": the vocabulary has " + std::to_string(tokens->as_array().size()) +
                      " tokens but 'token_embd.weight' has " + std::to_string(emb->dims[1]) + " rows");
  m->tok_embd_ = tl.matrix("token_embd.weight", hp.n_embd, hp.n_vocab);
  m->output_norm_ = tl.vec("output_norm.weight", hp.n_embd);
  m->rope_freqs_ = tl.vec("rope_freqs.weight", hp.n_rot / 2, false);
  hp.tied_output = !tl.has("output.weight");
  m->output_ = hp.tied_output ? m->tok_embd_ : tl.matrix("output.weight", hp.n_embd, hp.n_vocab);

  const int q = hp.n_q_dim(), kv = hp.n_kv_dim();
  // The last block first: a block_count far past the file's blocks (2^24) would otherwise size
  // the layer table (gigabytes) before the first missing tensor is found.
  if (const std::string last = "blk." + std::to_string(hp.n_layer - 1) + ".attn_norm.weight"; !tl.has(last))
    return make_error(f.path() + ": block_count is " + std::to_string(hp.n_layer) + " but there is no tensor '" + last + "'");
  m->layers_.resize(static_cast<size_t>(hp.n_layer));
  for (int i = 0; i < hp.n_layer && !tl.failed(); ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    auto& L = m->layers_[static_cast<size_t>(i)];
    L.attn_norm = tl.vec(b + "attn_norm.weight", hp.n_embd);
    L.wq = tl.matrix(b + "attn_q.weight", hp.n_embd, q);
    L.wk = tl.matrix(b + "attn_k.weight", hp.n_embd, kv);
    L.wv = tl.matrix(b + "attn_v.weight", hp.n_embd, kv);
    L.wo = tl.matrix(b + "attn_output.weight", q, hp.n_embd);
    if (hp.qkv_bias) {
      L.bq = tl.vec(b + "attn_q.bias", q);
      L.bk = tl.vec(b + "attn_k.bias", kv);
      L.bv = tl.vec(b + "attn_v.bias", kv);
    }
    L.ffn_norm = tl.vec(b + "ffn_norm.weight", hp.n_embd);
    L.w_gate = tl.matrix(b + "ffn_gate.weight", hp.n_embd, hp.n_ff);
    L.w_up = tl.matrix(b + "ffn_up.weight", hp.n_embd, hp.n_ff);
    L.w_down = tl.matrix(b + "ffn_down.weight", hp.n_ff, hp.n_embd);
  }
  if (tl.failed()) return make_error(f.path() + ": " + tl.error());

  // Matrices of a type without kernels are converted to Q8_0 only when a backend that reads them
  // row by row asks (prepare_matmul_weights): the fast order packs them from the file's bytes.
  for (const weight_view* w : m->matrices(m->layers_, m->output_))
    if (const auto* tr = traits_of(w->type); tr && !tr->matmul) {
      m->q8_0_equivalent_bytes_ += static_cast<size_t>(w->n_out) * row_bytes(ggml_type::q8_0, w->n_in);
      m->converted_source_bytes_ += static_cast<size_t>(w->n_out) * w->row_stride;
    }
  return m;
}

std::vector<weight_view*> llama_model::matrices(std::vector<layer_weights>& layers, weight_view& output) {
  // In the order a step reads them.
  std::vector<weight_view*> ws;
  for (auto& L : layers)
    for (weight_view* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) ws.push_back(w);
  ws.push_back(&output);
  return ws;
}

status llama_model::prepare_matmul_weights() const {
  std::call_once(convert_once_, [this] {
    if (converted_source_bytes_ == 0) return;
    conv_layers_ = layers_;
    conv_output_ = output_;
    // The token embeddings stay as they are (a row is dequantized per token), but a tied output
    // head of a type without kernels gets its own Q8_0 copy.
    auto conv = convert_for_matmul(matrices(conv_layers_, conv_output_), *file_, tok_embd_.data);
    if (!conv) {
      convert_error_ = file_->path() + ": " + conv.error();
      return;
    }
    std::fprintf(stderr, "troupe: %s\n", describe(conv.value()).c_str());
    converted_ = conv->memory;
    converted_bytes_ = conv->bytes;
  });
  if (!convert_error_.empty()) return make_error(convert_error_);
  return {};
}

const std::vector<layer_weights>& llama_model::matmul_layers() const {
  return converted_ ? conv_layers_ : layers_;
}

const weight_view& llama_model::matmul_output() const { return converted_ ? conv_output_ : output_; }

size_t llama_model::weight_bytes() const {
  size_t n = 0;
  for (const auto& t : file_->tensors()) n += t.bytes;
  return n - converted_source_bytes_ + q8_0_equivalent_bytes_;
}

}  // namespace troupe::model
