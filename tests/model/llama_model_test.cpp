// Loading: matrices of the types without matmul kernels (Q5_0, Q5_1, Q2_K, Q3_K, Q5_K) become
// Q8_0 copies at load, and a model of them computes what the same weights stored as Q8_0 do,
// and close to what they compute as F32.
#include "model/llama_model.hpp"
#include "model/cpu_backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "model/backend.hpp"
#include "model/batch_generator.hpp"
#include "model/gguf_writer.hpp"
#include "model/quant.hpp"
#include "tests/support/synthetic_model.hpp"

using namespace troupe;
using namespace troupe::model;

namespace {

// The image of `src` with every tensor's type chosen by `type_of` (a changed tensor is
// dequantized and quantized again with quantize_row); metadata copied as is.
std::shared_ptr<gguf_file> rewrite(const gguf_file& src, const std::function<ggml_type(const gguf_tensor&)>& type_of) {
  gguf_writer w;
  for (const auto& [key, value] : src.metadata())
    if (key != "general.alignment") w.set_value(key, value);
  std::vector<float> row;
  for (const auto& t : src.tensors()) {
    const ggml_type to = type_of(t);
    if (to == t.type) {
      w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.bytes));
      continue;
    }
    const int64_t n = t.dims[0];
    const size_t in_stride = row_bytes(t.type, n), out_stride = row_bytes(to, n);
    std::vector<uint8_t> out(out_stride * static_cast<size_t>(t.rows()));
    row.resize(static_cast<size_t>(n));
    for (int64_t r = 0; r < t.rows(); ++r) {
      dequantize_row(t.type, t.data + static_cast<size_t>(r) * in_stride, row.data(), n);
      quantize_row(to, row.data(), out.data() + static_cast<size_t>(r) * out_stride, n);
    }
    w.add_tensor(t.name, to, t.dims, std::move(out));
  }
  auto f = gguf_file::from_bytes(w.to_bytes(), "rewritten");
  if (!f) throw std::runtime_error(f.error());
  return f.value();
}

// The image of `src` with one metadata key set to `value`.
std::shared_ptr<gguf_file> with_key(const gguf_file& src, const std::string& key, const gguf_value& value) {
  gguf_writer w;
  for (const auto& [k, v] : src.metadata())
    if (k != "general.alignment" && k != key) w.set_value(k, v);
  w.set_value(key, value);
  for (const auto& t : src.tensors()) w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.bytes));
  auto f = gguf_file::from_bytes(w.to_bytes(), "edited.gguf");
  if (!f) throw std::runtime_error(f.error());
  return f.value();
}

gguf_value u32(uint32_t x) {
  gguf_value v;
  v.type = gguf_value_type::u32;
  v.v = uint64_t{x};
  return v;
}

bool is_matrix(const gguf_tensor& t) { return t.dims.size() == 2 && t.name != "token_embd.weight"; }

// A synthetic model whose matrices and token embeddings (the tied output head) are Q5_K, but for
// one Q3_K, one Q5_0, one Q2_K and one Q5_1 matrix.
std::shared_ptr<gguf_file> mixed_model() {
  test::synthetic_options o;
  o.matrix_type = ggml_type::q5_k;
  o.embd_type = ggml_type::q5_k;
  const std::map<std::string, ggml_type> others = {{"blk.0.attn_v.weight", ggml_type::q3_k},
                                                   {"blk.1.ffn_up.weight", ggml_type::q5_0},
                                                   {"blk.1.attn_k.weight", ggml_type::q2_k},
                                                   {"blk.0.ffn_down.weight", ggml_type::q5_1}};
  return rewrite(*test::make_synthetic_file(o), [&](const gguf_tensor& t) {
    auto it = others.find(t.name);
    return it == others.end() ? t.type : it->second;
  });
}

std::unique_ptr<backend> cpu(std::shared_ptr<llama_model> m, matmul_order order) {
  backend_options bo;
  bo.n_threads = 2;
  bo.kv_bytes = 8ll << 20;
  bo.matmul = order;
  auto b = make_backend("cpu", std::move(m), bo);
  if (!b) throw std::runtime_error(b.error());
  return std::move(b.value());
}

// Logits after the prompt (one step) and after each of `then` fed one per step.
std::vector<std::vector<float>> logits_along(backend& be, const std::vector<int32_t>& prompt,
                                             const std::vector<int32_t>& then) {
  std::vector<std::vector<float>> out;
  batch_sequence s;
  s.seq_id = 1;
  s.block_table = {0, 1, 2, 3};
  s.tokens = prompt;
  for (size_t step = 0; step <= then.size(); ++step) {
    batch b;
    b.seqs.push_back(s);
    auto r = be.forward(b);
    if (!r) throw std::runtime_error(r.error());
    out.emplace_back(r->row(0), r->row(0) + r->n_vocab);
    s.n_past += static_cast<int32_t>(s.tokens.size());
    if (step < then.size()) s.tokens = {then[step]};
  }
  return out;
}

const std::vector<int32_t> k_prompt = {260, 72, 101, 108, 108, 111, 32, 116, 104, 101, 114, 101};

}  // namespace

TEST(LlamaModel, RopeAndHeadSizesOutOfRangeAreRefusedByKeyAndValue) {
  const auto base = test::make_synthetic_file(test::synthetic_options{});  // head size 256 / 4 = 64
  ASSERT_TRUE(llama_model::load(base).ok());
  auto refused = [&](const std::string& key, const gguf_value& v, const std::string& why) {
    auto m = llama_model::load(with_key(*base, key, v));
    ASSERT_FALSE(m.ok()) << key;
    EXPECT_NE(m.error().find("edited.gguf: metadata key '" + key + "' has invalid value " + why), std::string::npos)
        << m.error();
  };
  refused("llama.rope.dimension_count", u32(0), "0 (an even count, 2..the head size 64)");
  refused("llama.rope.dimension_count", u32(66), "66 (an even count, 2..the head size 64)");
  refused("llama.rope.dimension_count", u32(31), "31");
  refused("llama.attention.key_length", u32(0), "0 (an even head size, 2..4096)");
  gguf_value negative_scale;
  negative_scale.type = gguf_value_type::f32;
  negative_scale.v = -1.0;
  refused("llama.rope.scale_linear", negative_scale, "-1.000000 (a positive factor)");
  // Fewer rotated dimensions than the head has is partial rotary embedding: allowed.
  EXPECT_TRUE(llama_model::load(with_key(*base, "llama.rope.dimension_count", u32(32))).ok());
}

// Metadata a hostile or broken file may hold: each refused at load naming its key (before, a
// string or inf fell back to a default or generated nothing, 2^32 + 3 KV heads read as 3, and a
// block_count of 2^24 sized the layer table to gigabytes first).
TEST(LlamaModel, MetadataOfTheWrongTypeOrRangeIsRefusedByKey) {
  const auto base = test::make_synthetic_file(test::synthetic_options{});
  auto error_of = [&](const std::string& key, const gguf_value& v) {
    auto m = llama_model::load(with_key(*base, key, v));
    return m.ok() ? std::string("loaded") : m.error();
  };
  gguf_value text;
  text.type = gguf_value_type::string;
  text.v = std::string("100000");
  gguf_value inf;
  inf.type = gguf_value_type::f64;
  inf.v = std::numeric_limits<double>::infinity();
  gguf_value big;
  big.type = gguf_value_type::u64;
  big.v = (uint64_t{1} << 32) + 2;
  EXPECT_NE(error_of("llama.rope.freq_base", text).find("'llama.rope.freq_base' is not a number"), std::string::npos);
  EXPECT_NE(error_of("llama.rope.freq_base", inf).find("'llama.rope.freq_base' is not finite"), std::string::npos);
  EXPECT_NE(error_of("llama.attention.layer_norm_rms_epsilon", inf).find("layer_norm_rms_epsilon' is not finite"),
            std::string::npos);
  EXPECT_NE(error_of("llama.attention.head_count_kv", text).find("'llama.attention.head_count_kv' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of("llama.attention.head_count_kv", big).find("head_count_kv (4294967298)"), std::string::npos);
  EXPECT_NE(error_of("llama.attention.value_length", u32(32)).find("'llama.attention.value_length' is 32"),
            std::string::npos);
  EXPECT_NE(error_of("llama.block_count", u32(1u << 24)).find("block_count is 16777216 but there is no tensor 'blk.16777215"),
            std::string::npos);
  gguf_value tokens;
  tokens.type = gguf_value_type::array;
  tokens.array_type = gguf_value_type::string;
  auto arr = std::make_shared<gguf_array>();
  for (int i = 0; i < 10; ++i) {
    gguf_value t;
    t.type = gguf_value_type::string;
    t.v = std::string(1, static_cast<char>('a' + i));
    arr->push_back(t);
  }
  tokens.v = arr;
  EXPECT_NE(error_of("tokenizer.ggml.tokens", tokens).find("the vocabulary has 10 tokens but 'token_embd.weight' has"),
            std::string::npos);
}

// rope.scaling.type and .factor as llama.cpp reads them: the factor from rope.scaling.factor,
// else the older rope.scale_linear, 0 meaning none; the type linear when not given; other types
// are refused by name rather than computed wrong.
TEST(LlamaModel, RopeScalingLinearIsReadAndOthersAreRefused) {
  const auto base = test::make_synthetic_file(test::synthetic_options{});
  gguf_value linear;
  linear.type = gguf_value_type::string;
  linear.v = std::string("linear");
  gguf_value four;
  four.type = gguf_value_type::f32;
  four.v = 4.0;
  auto scaled = llama_model::load(with_key(*with_key(*base, "llama.rope.scaling.type", linear), "llama.rope.scaling.factor", four));
  ASSERT_TRUE(scaled.ok()) << scaled.error();
  EXPECT_FLOAT_EQ(scaled.value()->params().rope_freq_scale, 0.25f);
  auto legacy = llama_model::load(with_key(*base, "llama.rope.scale_linear", four));
  ASSERT_TRUE(legacy.ok()) << legacy.error();
  EXPECT_FLOAT_EQ(legacy.value()->params().rope_freq_scale, 0.25f);
  auto factor_only = llama_model::load(with_key(*base, "llama.rope.scaling.factor", four));
  ASSERT_TRUE(factor_only.ok()) << factor_only.error();
  EXPECT_FLOAT_EQ(factor_only.value()->params().rope_freq_scale, 0.25f);
  auto type_and_legacy = llama_model::load(with_key(*with_key(*base, "llama.rope.scaling.type", linear), "llama.rope.scale_linear", four));
  ASSERT_TRUE(type_and_legacy.ok()) << type_and_legacy.error();
  EXPECT_FLOAT_EQ(type_and_legacy.value()->params().rope_freq_scale, 0.25f);
  gguf_value zero = four;
  zero.v = 0.0;
  auto none = llama_model::load(with_key(*base, "llama.rope.scaling.factor", zero));
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_FLOAT_EQ(none.value()->params().rope_freq_scale, 1.0f);
  gguf_value yarn = linear;
  yarn.v = std::string("yarn");
  auto refused = llama_model::load(with_key(*base, "llama.rope.scaling.type", yarn));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("'llama.rope.scaling.type' is 'yarn'"), std::string::npos) << refused.error();
}

// rope_freqs.weight (Llama 3.1 and later): each rotary pair's angle divided by its factor, as
// llama.cpp's rope cache does. Factors of 2 everywhere are rope.scale_linear = 2 exactly (x / 2
// and 0.5 * x are the same float); factors of 1 change nothing; a wrong size is refused.
TEST(LlamaModel, RopeFrequencyFactorsDivideThePairsAngles) {
  const auto base = test::make_synthetic_file(test::synthetic_options{});
  const int n_rot = 64;
  auto with_factors = [&](std::vector<float> ff) {
    gguf_writer w;
    for (const auto& [k, v] : base->metadata())
      if (k != "general.alignment") w.set_value(k, v);
    for (const auto& t : base->tensors()) w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.bytes));
    std::vector<uint8_t> bytes(ff.size() * sizeof(float));
    std::memcpy(bytes.data(), ff.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", ggml_type::f32, {static_cast<int64_t>(ff.size())}, std::move(bytes));
    auto f = gguf_file::from_bytes(w.to_bytes(), "freqs.gguf");
    if (!f) throw std::runtime_error(f.error());
    return llama_model::load(f.value());
  };
  auto plain = llama_model::load(base);
  auto ones = with_factors(std::vector<float>(n_rot / 2, 1.0f));
  auto twos = with_factors(std::vector<float>(n_rot / 2, 2.0f));
  gguf_value two;
  two.type = gguf_value_type::f32;
  two.v = 2.0;
  auto linear = llama_model::load(with_key(*base, "llama.rope.scale_linear", two));
  for (auto* m : {&plain, &ones, &twos, &linear}) ASSERT_TRUE(m->ok()) << m->error();
  EXPECT_EQ(plain.value()->rope_freq_factors(), nullptr);
  ASSERT_NE(twos.value()->rope_freq_factors(), nullptr);
  const std::vector<int32_t> then = {101, 32, 44};
  const auto l_plain = logits_along(*cpu(plain.value(), matmul_order::llama_cpp), k_prompt, then);
  const auto l_ones = logits_along(*cpu(ones.value(), matmul_order::llama_cpp), k_prompt, then);
  const auto l_twos = logits_along(*cpu(twos.value(), matmul_order::llama_cpp), k_prompt, then);
  const auto l_linear = logits_along(*cpu(linear.value(), matmul_order::llama_cpp), k_prompt, then);
  EXPECT_EQ(l_ones, l_plain);
  EXPECT_EQ(l_twos, l_linear);
  EXPECT_NE(l_twos, l_plain);
  auto wrong = with_factors(std::vector<float>(n_rot, 1.0f));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().find("tensor 'rope_freqs.weight' has shape"), std::string::npos) << wrong.error();
}

TEST(LlamaModel, MatricesWithoutKernelsBecomeQ8_0CopiesWhenAsked) {
  auto file = mixed_model();
  auto m = llama_model::load(file);
  ASSERT_TRUE(m.ok()) << m.error();
  const auto& model = *m.value();
  // Loading copies nothing: the matrices are the file's, in its types.
  EXPECT_EQ(model.converted_bytes(), 0u);
  EXPECT_EQ(model.layers()[0].wv.type, ggml_type::q3_k);
  EXPECT_EQ(model.layers()[0].wv.data, file->tensor("blk.0.attn_v.weight")->data);
  ASSERT_TRUE(model.prepare_matmul_weights().ok());
  ASSERT_TRUE(model.prepare_matmul_weights().ok());  // once
  // The token embeddings stay in the file's type (a row is dequantized per token) ...
  EXPECT_EQ(model.token_embd().type, ggml_type::q5_k);
  EXPECT_EQ(model.token_embd().data, file->tensor("token_embd.weight")->data);
  // ... and every matrix a matmul reads as stored is Q8_0 in the model's own memory, the tied
  // head too.
  size_t expect_bytes = 0;
  std::vector<const weight_view*> ws = {&model.matmul_output()};
  for (const auto& L : model.matmul_layers())
    for (const weight_view* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) ws.push_back(w);
  for (const weight_view* w : ws) {
    EXPECT_EQ(w->type, ggml_type::q8_0);
    EXPECT_EQ(w->row_stride, row_bytes(ggml_type::q8_0, w->n_in));
    expect_bytes += static_cast<size_t>(w->n_out) * w->row_stride;  // each a multiple of 64 here
  }
  EXPECT_EQ(model.converted_bytes(), expect_bytes);
  EXPECT_NE(model.matmul_output().data, model.token_embd().data);
  // Each converted row is the conversion of the file's row.
  const auto* v = file->tensor("blk.0.attn_v.weight");
  ASSERT_EQ(v->type, ggml_type::q3_k);
  const auto& wv = model.matmul_layers()[0].wv;
  std::vector<float> row(static_cast<size_t>(wv.n_in));
  std::vector<uint8_t> want(wv.row_stride);
  for (int64_t r = 0; r < wv.n_out; r += 17) {
    dequantize_row(v->type, v->data + static_cast<size_t>(r) * row_bytes(v->type, wv.n_in), row.data(), wv.n_in);
    quantize_row(ggml_type::q8_0, row.data(), want.data(), wv.n_in);
    ASSERT_EQ(std::memcmp(want.data(), static_cast<const uint8_t*>(wv.data) + static_cast<size_t>(r) * wv.row_stride,
                          wv.row_stride),
              0)
        << "row " << r;
  }
  // weight_bytes counts what the matmuls read: the converted copies instead of the originals
  // (here every tensor but the norms; the tied head's original is the embedding table).
  size_t file_bytes = 0, norm_bytes = 0;
  for (const auto& t : file->tensors()) {
    file_bytes += t.bytes;
    if (t.dims.size() == 1) norm_bytes += t.bytes;
  }
  EXPECT_EQ(model.weight_bytes(), norm_bytes + expect_bytes);
  EXPECT_LT(model.weight_bytes(), 2 * file_bytes);
}

// The fast order packs such matrices straight from the file's bytes (each group's rows converted
// as it is packed): no Q8_0 copy is made or kept, and the logits are those of the copy's
// (ConvertedModelComputesAsTheSameWeightsStoredAsQ8_0).
TEST(LlamaModel, TheFastOrderPacksWithoutACopy) {
  auto m = llama_model::load(mixed_model());
  ASSERT_TRUE(m.ok()) << m.error();
  auto b = cpu(m.value(), matmul_order::fast);
  if (dynamic_cast<const cpu_backend&>(*b).order() != matmul_order::fast) GTEST_SKIP() << "no fast kernels on this CPU: the copy is what it reads";
  EXPECT_EQ(m.value()->converted_bytes(), 0u);
  auto exact = cpu(m.value(), matmul_order::llama_cpp);  // reads rows as stored: now the copy exists
  EXPECT_GT(m.value()->converted_bytes(), 0u);
}

TEST(LlamaModel, TypesWithKernelsAreNotCopied) {
  test::synthetic_options o;
  o.matrix_type = ggml_type::q4_k;
  o.embd_type = ggml_type::q6_k;
  auto file = test::make_synthetic_file(o);
  auto m = llama_model::load(file);
  ASSERT_TRUE(m.ok()) << m.error();
  ASSERT_TRUE(m.value()->prepare_matmul_weights().ok());
  EXPECT_EQ(m.value()->converted_bytes(), 0u);
  EXPECT_EQ(&m.value()->matmul_layers(), &m.value()->layers());
  EXPECT_EQ(m.value()->layers()[0].wq.type, ggml_type::q4_k);
  EXPECT_EQ(m.value()->layers()[0].wq.data, file->tensor("blk.0.attn_q.weight")->data);
  EXPECT_EQ(m.value()->output().data, file->tensor("token_embd.weight")->data);
  size_t file_bytes = 0;
  for (const auto& t : file->tensors()) file_bytes += t.bytes;
  EXPECT_EQ(m.value()->weight_bytes(), file_bytes);
}

// Converting at load is the same as shipping the converted weights: the logits equal, bit for
// bit, those of the same model with its matrices stored as Q8_0 in the file (and an untied
// Q8_0 output head), in both matmul orders.
TEST(LlamaModel, ConvertedModelComputesAsTheSameWeightsStoredAsQ8_0) {
  auto mixed = mixed_model();
  auto q8_file = rewrite(*mixed, [](const gguf_tensor& t) { return is_matrix(t) ? ggml_type::q8_0 : t.type; });
  {
    // The untied head: token_embd converted, under output.weight.
    gguf_writer w;
    for (const auto& [key, value] : q8_file->metadata())
      if (key != "general.alignment") w.set_value(key, value);
    for (const auto& t : q8_file->tensors()) w.add_tensor(t.name, t.type, t.dims, std::vector<uint8_t>(t.data, t.data + t.bytes));
    const auto* e = mixed->tensor("token_embd.weight");
    std::vector<uint8_t> head(row_bytes(ggml_type::q8_0, e->dims[0]) * static_cast<size_t>(e->rows()));
    std::vector<float> row(static_cast<size_t>(e->dims[0]));
    for (int64_t r = 0; r < e->rows(); ++r) {
      dequantize_row(e->type, e->data + static_cast<size_t>(r) * row_bytes(e->type, e->dims[0]), row.data(), e->dims[0]);
      quantize_row(ggml_type::q8_0, row.data(), head.data() + static_cast<size_t>(r) * row_bytes(ggml_type::q8_0, e->dims[0]),
                   e->dims[0]);
    }
    w.add_tensor("output.weight", ggml_type::q8_0, e->dims, std::move(head));
    q8_file = gguf_file::from_bytes(w.to_bytes(), "q8_0").value();
  }
  auto a = llama_model::load(mixed);
  auto b = llama_model::load(q8_file);
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_EQ(b.value()->converted_bytes(), 0u);
  EXPECT_FALSE(b.value()->params().tied_output);
  for (matmul_order order : {matmul_order::llama_cpp, matmul_order::fast}) {
    auto ba = cpu(a.value(), order), bb = cpu(b.value(), order);
    const auto la = logits_along(*ba, k_prompt, {101, 7, 250, 33});
    const auto lb = logits_along(*bb, k_prompt, {101, 7, 250, 33});
    ASSERT_EQ(la.size(), lb.size());
    for (size_t s = 0; s < la.size(); ++s) {
      ASSERT_EQ(la[s].size(), lb[s].size());
      EXPECT_EQ(std::memcmp(la[s].data(), lb[s].data(), la[s].size() * sizeof(float)), 0)
          << matmul_order_name(order) << " step " << s;
    }
  }
}

// Against the same weights as F32 (each tensor of the mixed model dequantized), a model of
// converted weights differs by the Q8_0 rounding of weights (at most 0.562 of a step of amax /
// 127 per block of 32, an RMS of ~0.6% of the weights' spread for normal weights) and of
// activations (the quantized matmuls' int8 inputs, the same again), compounded over two layers
// and the head. Measured on this model: logits differ by at most 0.43% of the largest |logit|
// (prompt and 7 greedy steps); asserted: 1.5%. The greedy tokens match the F32 model's, and the
// run generates all it was asked to.
TEST(LlamaModel, ConvertedModelStaysCloseToItsF32Weights) {
  auto mixed = mixed_model();
  auto f32_file = rewrite(*mixed, [](const gguf_tensor& t) { return t.dims.size() == 2 ? ggml_type::f32 : t.type; });
  auto a = llama_model::load(mixed);
  auto b = llama_model::load(f32_file);
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  auto ba = cpu(a.value(), matmul_order::llama_cpp), bb = cpu(b.value(), matmul_order::llama_cpp);

  generation_request req;
  req.prompt = k_prompt;
  req.max_tokens = 8;
  batch_generator gen(*ba);
  const auto out = gen.run({req});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].error.empty()) << out[0].error;
  ASSERT_EQ(out[0].tokens.size(), 8u);

  const std::vector<int32_t> fed(out[0].tokens.begin(), out[0].tokens.end() - 1);
  const auto la = logits_along(*ba, k_prompt, fed);
  const auto lb = logits_along(*bb, k_prompt, fed);
  double worst = 0.0;
  for (size_t s = 0; s < la.size(); ++s) {
    float amax = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < la[s].size(); ++i) {
      amax = std::max(amax, std::fabs(lb[s][i]));
      diff = std::max(diff, std::fabs(la[s][i] - lb[s][i]));
    }
    worst = std::max(worst, static_cast<double>(diff / amax));
    const auto argmax = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    EXPECT_EQ(argmax(la[s]), out[0].tokens[s]) << "step " << s;
    EXPECT_EQ(argmax(lb[s]), out[0].tokens[s]) << "step " << s;
  }
  std::printf("converted vs F32 weights: max logit difference %.4f of the largest logit\n", worst);
  EXPECT_LT(worst, 0.015);
}
