#include "tests/support/synthetic_model.hpp"

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "model/gguf_writer.hpp"
#include "model/quant.hpp"

namespace troupe::test {

namespace {

// GPT-2's byte → printable code point mapping, UTF-8 encoded.
std::string byte_token(int b) {
  int cp;
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
    cp = b;
  } else {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::vector<uint8_t> random_matrix(model::ggml_type type, int64_t n_in, int64_t n_out, float scale, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> row(static_cast<size_t>(n_in));
  const size_t rb = model::row_bytes(type, n_in);
  std::vector<uint8_t> out(rb * static_cast<size_t>(n_out));
  for (int64_t r = 0; r < n_out; ++r) {
    for (auto& x : row) x = dist(rng);
    model::quantize_row(type, row.data(), out.data() + rb * static_cast<size_t>(r), n_in);
  }
  return out;
}

std::vector<uint8_t> norm_vector(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(0.8f, 1.2f);
  std::vector<uint8_t> out(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    float v = dist(rng);
    std::memcpy(out.data() + i * 4, &v, 4);
  }
  return out;
}

}  // namespace

std::vector<uint8_t> make_synthetic_gguf(const synthetic_options& o) {
  std::mt19937 rng(o.seed);
  model::gguf_writer w;
  const std::string a = o.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "synthetic-" + a);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(o.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(o.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(o.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(o.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(o.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(o.n_head_kv));
  w.set_f32(a + ".rope.freq_base", o.rope_base);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);

  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_token(b));
    types.push_back(1);
  }
  const std::vector<std::string> merges = {"Ġ t", "h e", "Ġt he", "i n", "e r"};
  for (const auto& m : merges) {
    auto sp = m.find(' ');
    tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
    types.push_back(1);
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(s);
    types.push_back(3);
  }
  const int n_vocab = static_cast<int>(tokens.size());
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "gpt2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(n_vocab - 3));
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(n_vocab - 3));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_string("tokenizer.chat_template", "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}");

  const int hd = o.n_embd / o.n_head;
  const int kv = o.n_head_kv * hd;
  const float s_in = 1.0f / std::sqrt(static_cast<float>(o.n_embd));
  w.add_tensor("token_embd.weight", o.embd_type, {o.n_embd, n_vocab}, random_matrix(o.embd_type, o.n_embd, n_vocab, 1.0f, rng));
  w.add_tensor("output_norm.weight", model::ggml_type::f32, {o.n_embd}, norm_vector(o.n_embd, rng));
  if (!o.tied_output)
    w.add_tensor("output.weight", o.matrix_type, {o.n_embd, n_vocab}, random_matrix(o.matrix_type, o.n_embd, n_vocab, s_in, rng));
  for (int l = 0; l < o.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const auto t = o.matrix_type;
    w.add_tensor(b + "attn_norm.weight", model::ggml_type::f32, {o.n_embd}, norm_vector(o.n_embd, rng));
    w.add_tensor(b + "attn_q.weight", t, {o.n_embd, o.n_embd}, random_matrix(t, o.n_embd, o.n_embd, s_in, rng));
    w.add_tensor(b + "attn_k.weight", t, {o.n_embd, kv}, random_matrix(t, o.n_embd, kv, s_in, rng));
    w.add_tensor(b + "attn_v.weight", t, {o.n_embd, kv}, random_matrix(t, o.n_embd, kv, s_in, rng));
    if (o.arch == "qwen2") {
      w.add_tensor(b + "attn_q.bias", model::ggml_type::f32, {o.n_embd}, random_matrix(model::ggml_type::f32, o.n_embd, 1, 0.1f, rng));
      w.add_tensor(b + "attn_k.bias", model::ggml_type::f32, {kv}, random_matrix(model::ggml_type::f32, kv, 1, 0.1f, rng));
      w.add_tensor(b + "attn_v.bias", model::ggml_type::f32, {kv}, random_matrix(model::ggml_type::f32, kv, 1, 0.1f, rng));
    }
    w.add_tensor(b + "attn_output.weight", t, {o.n_embd, o.n_embd}, random_matrix(t, o.n_embd, o.n_embd, s_in, rng));
    w.add_tensor(b + "ffn_norm.weight", model::ggml_type::f32, {o.n_embd}, norm_vector(o.n_embd, rng));
    w.add_tensor(b + "ffn_gate.weight", t, {o.n_embd, o.n_ff}, random_matrix(t, o.n_embd, o.n_ff, s_in, rng));
    w.add_tensor(b + "ffn_up.weight", t, {o.n_embd, o.n_ff}, random_matrix(t, o.n_embd, o.n_ff, s_in, rng));
    w.add_tensor(b + "ffn_down.weight", t, {o.n_ff, o.n_embd},
                 random_matrix(t, o.n_ff, o.n_embd, 1.0f / std::sqrt(static_cast<float>(o.n_ff)), rng));
  }
  return w.to_bytes();
}

std::shared_ptr<model::gguf_file> make_synthetic_file(const synthetic_options& o) {
  auto f = model::gguf_file::from_bytes(make_synthetic_gguf(o), "synthetic-" + o.arch);
  if (!f) throw std::runtime_error(f.error());
  return f.value();
}

}  // namespace troupe::test
