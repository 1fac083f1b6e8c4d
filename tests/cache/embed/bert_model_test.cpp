// The BERT encoder on a tiny random model, against a plain double-precision transcription of
// Hugging Face's BertModel written out in this test (the real model is checked against PyTorch
// in minilm_embedder_real_model_test.cpp).
#include "cache/embed/bert_model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "tests/support/safetensors_builder.hpp"

using namespace troupe::cache;

namespace {

constexpr int V = 23, H = 8, NH = 2, I = 16, L = 2, P = 12;

struct tiny_bert {
  std::map<std::string, std::vector<float>> t;
  std::map<std::string, std::vector<int64_t>> shape;
};

tiny_bert make_weights(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  tiny_bert b;
  auto add = [&](const std::string& n, std::vector<int64_t> s, float base = 0.0f) {
    int64_t count = 1;
    for (auto d : s) count *= d;
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& x : v) x = base + nd(rng);
    b.t[n] = v;
    b.shape[n] = s;
  };
  add("embeddings.word_embeddings.weight", {V, H});
  add("embeddings.position_embeddings.weight", {P, H});
  add("embeddings.token_type_embeddings.weight", {2, H});
  add("embeddings.LayerNorm.weight", {H}, 1.0f);
  add("embeddings.LayerNorm.bias", {H});
  for (int l = 0; l < L; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"}) {
      add(p + m + ".weight", {H, H});
      add(p + m + ".bias", {H});
    }
    add(p + "attention.output.LayerNorm.weight", {H}, 1.0f);
    add(p + "attention.output.LayerNorm.bias", {H});
    add(p + "intermediate.dense.weight", {I, H});
    add(p + "intermediate.dense.bias", {I});
    add(p + "output.dense.weight", {H, I});
    add(p + "output.dense.bias", {H});
    add(p + "output.LayerNorm.weight", {H}, 1.0f);
    add(p + "output.LayerNorm.bias", {H});
  }
  return b;
}

std::vector<uint8_t> to_safetensors(const tiny_bert& b, bool f16_matrices, const std::string& prefix = "") {
  troupe::test::safetensors_builder sb;
  for (const auto& [n, v] : b.t) {
    if (f16_matrices && b.shape.at(n).size() == 2 && n.find("encoder.") == 0) sb.add_f16(prefix + n, b.shape.at(n), v);
    else sb.add_f32(prefix + n, b.shape.at(n), v);
  }
  return sb.build();
}

bert_config tiny_config() {
  bert_config c;
  c.vocab_size = V;
  c.hidden = H;
  c.n_layers = L;
  c.n_heads = NH;
  c.intermediate = I;
  c.max_positions = P;
  c.type_vocab_size = 2;
  c.layer_norm_eps = 1e-12f;
  return c;
}

// Hugging Face's BertModel, spelled out in doubles.
std::vector<double> reference_forward(const tiny_bert& b, const std::vector<int32_t>& ids) {
  const int n = static_cast<int>(ids.size());
  auto W = [&](const std::string& name) -> const std::vector<float>& { return b.t.at(name); };
  auto layer_norm = [&](std::vector<double>& x, const std::string& p) {
    for (int t = 0; t < n; ++t) {
      double mean = 0, var = 0;
      for (int i = 0; i < H; ++i) mean += x[t * H + i];
      mean /= H;
      for (int i = 0; i < H; ++i) var += (x[t * H + i] - mean) * (x[t * H + i] - mean);
      var /= H;
      for (int i = 0; i < H; ++i)
        x[t * H + i] = (x[t * H + i] - mean) / std::sqrt(var + 1e-12) * W(p + ".weight")[i] + W(p + ".bias")[i];
    }
  };
  auto linear = [&](const std::vector<double>& x, int in, int out, const std::string& p) {
    std::vector<double> y(static_cast<size_t>(n * out));
    for (int t = 0; t < n; ++t)
      for (int o = 0; o < out; ++o) {
        double s = W(p + ".bias")[o];
        for (int i = 0; i < in; ++i) s += W(p + ".weight")[o * in + i] * x[t * in + i];
        y[t * out + o] = s;
      }
    return y;
  };
  std::vector<double> x(static_cast<size_t>(n * H));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < H; ++i)
      x[t * H + i] = W("embeddings.word_embeddings.weight")[ids[t] * H + i] +
                     W("embeddings.position_embeddings.weight")[t * H + i] + W("embeddings.token_type_embeddings.weight")[i];
  layer_norm(x, "embeddings.LayerNorm");
  const int d = H / NH;
  for (int l = 0; l < L; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    auto q = linear(x, H, H, p + "attention.self.query");
    auto k = linear(x, H, H, p + "attention.self.key");
    auto v = linear(x, H, H, p + "attention.self.value");
    std::vector<double> ctx(static_cast<size_t>(n * H), 0.0);
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < n; ++i) {
        std::vector<double> s(static_cast<size_t>(n));
        double mx = -1e300, sum = 0;
        for (int j = 0; j < n; ++j) {
          double dotp = 0;
          for (int e = 0; e < d; ++e) dotp += q[i * H + h * d + e] * k[j * H + h * d + e];
          s[j] = dotp / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j < n; ++j)
          for (int e = 0; e < d; ++e) ctx[i * H + h * d + e] += s[j] / sum * v[j * H + h * d + e];
      }
    auto a = linear(ctx, H, H, p + "attention.output.dense");
    for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
    layer_norm(x, p + "attention.output.LayerNorm");
    auto f = linear(x, H, I, p + "intermediate.dense");
    for (auto& z : f) z = 0.5 * z * (1.0 + std::erf(z / std::sqrt(2.0)));
    auto o = linear(f, I, H, p + "output.dense");
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    layer_norm(x, p + "output.LayerNorm");
  }
  return x;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST(BertModel, MatchesAPlainTranscriptionOfBertModel) {
  const auto w = make_weights(7);
  auto f = safetensors_file::from_bytes(to_safetensors(w, false));
  ASSERT_TRUE(f.ok()) << f.error();
  auto m = bert_model::load(f.value(), tiny_config());
  ASSERT_TRUE(m.ok()) << m.error();
  troupe::model::thread_pool pool(2);
  for (std::vector<int32_t> ids : {std::vector<int32_t>{3}, std::vector<int32_t>{1, 5, 22, 7, 0, 9, 9, 2, 11, 4, 13, 6}}) {
    std::vector<float> out;
    ASSERT_TRUE(m.value()->forward(ids.data(), static_cast<int>(ids.size()), out, pool).ok());
    ASSERT_EQ(out.size(), ids.size() * H);
    EXPECT_LT(max_abs_diff(out, reference_forward(w, ids)), 2e-4);
  }
}

TEST(BertModel, F16MatricesAndBertPrefixedNamesLoad) {
  const auto w = make_weights(11);
  auto f = safetensors_file::from_bytes(to_safetensors(w, true, "bert."));
  ASSERT_TRUE(f.ok()) << f.error();
  auto m = bert_model::load(f.value(), tiny_config());
  ASSERT_TRUE(m.ok()) << m.error();
  troupe::model::thread_pool pool(1);
  std::vector<int32_t> ids{2, 4, 6, 8};
  std::vector<float> out;
  ASSERT_TRUE(m.value()->forward(ids.data(), 4, out, pool).ok());
  EXPECT_LT(max_abs_diff(out, reference_forward(w, ids)), 2e-2);  // F16 weights round to ~1e-3
}

TEST(BertModel, LoadAndForwardErrorsNameTheProblem) {
  auto w = make_weights(3);
  w.t.erase("encoder.layer.1.output.dense.bias");
  auto f = safetensors_file::from_bytes(to_safetensors(w, false));
  ASSERT_TRUE(f.ok());
  auto m = bert_model::load(f.value(), tiny_config());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("'encoder.layer.1.output.dense.bias' is missing"), std::string::npos) << m.error();

  auto cfg = tiny_config();
  cfg.intermediate = 32;
  auto f2 = safetensors_file::from_bytes(to_safetensors(make_weights(3), false));
  auto m2 = bert_model::load(f2.value(), cfg);
  ASSERT_FALSE(m2.ok());
  EXPECT_NE(m2.error().find("has shape [16, 8], the config says [32, 8]"), std::string::npos) << m2.error();

  auto m3 = bert_model::load(f2.value(), tiny_config());
  ASSERT_TRUE(m3.ok());
  troupe::model::thread_pool pool(1);
  std::vector<float> out;
  std::vector<int32_t> bad{1, V};
  EXPECT_FALSE(m3.value()->forward(bad.data(), 2, out, pool).ok());
  std::vector<int32_t> too_long(P + 1, 1);
  EXPECT_FALSE(m3.value()->forward(too_long.data(), P + 1, out, pool).ok());
}

TEST(BertModel, ConfigParsing) {
  auto c = parse_bert_config(R"({"model_type":"bert","hidden_act":"gelu","hidden_size":384,"num_hidden_layers":6,
    "num_attention_heads":12,"intermediate_size":1536,"max_position_embeddings":512,"type_vocab_size":2,
    "vocab_size":30522,"layer_norm_eps":1e-12,"position_embedding_type":"absolute"})");
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c.value().hidden, 384);
  EXPECT_EQ(c.value().n_heads, 12);
  auto bad_act = parse_bert_config(R"({"hidden_act":"relu","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2,
    "intermediate_size":8,"max_position_embeddings":8,"type_vocab_size":2,"vocab_size":8})");
  ASSERT_FALSE(bad_act.ok());
  EXPECT_NE(bad_act.error().find("hidden_act 'relu'"), std::string::npos);
  auto missing = parse_bert_config(R"({"hidden_size":8})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("'vocab_size'"), std::string::npos) << missing.error();
  EXPECT_FALSE(parse_bert_config("{nope").ok());
}
