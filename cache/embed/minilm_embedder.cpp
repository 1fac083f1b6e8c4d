#include "cache/embed/minilm_embedder.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

namespace troupe::cache {

namespace {
result<std::string> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

minilm_embedder::minilm_embedder(wordpiece_tokenizer tok, std::unique_ptr<bert_model> model, int n_threads, int max_tokens,
                                 std::string weights)
    : tokenizer_(std::move(tok)), model_(std::move(model)), max_tokens_(max_tokens), weights_(std::move(weights)), pool_(n_threads) {}

result<std::unique_ptr<minilm_embedder>> minilm_embedder::load(const embedder_options& o) {
  const std::string& dir = o.model_dir;
  auto where = [&](const std::string& msg) { return make_error("minilm embedder (" + dir + "): " + msg); };
  auto cfg_text = slurp(dir + "/config.json");
  if (!cfg_text) return where(cfg_text.error() + " (run scripts/fetch-model.sh)");
  auto cfg = parse_bert_config(cfg_text.value());
  if (!cfg) return where(cfg.error());
  auto tok = wordpiece_tokenizer::from_vocab_file(dir + "/vocab.txt");
  if (!tok) return where(tok.error());
  if (static_cast<int>(tok.value().vocab_size()) != cfg.value().vocab_size)
    return where("vocab.txt has " + std::to_string(tok.value().vocab_size()) + " tokens, config.json says " +
                 std::to_string(cfg.value().vocab_size));
  auto file = safetensors_file::open(dir + "/model.safetensors");
  if (!file) return where(file.error());
  model::ggml_type wt;
  if (o.weights == "f32") wt = model::ggml_type::f32;
  else if (o.weights == "f16") wt = model::ggml_type::f16;
  else if (o.weights == "q8_0") wt = model::ggml_type::q8_0;
  else return where("weights '" + o.weights + "' is not one of f32, f16, q8_0");
  auto model = bert_model::load(file.value(), cfg.value(), wt);
  if (!model) return where(model.error());
  const int max_tokens = std::clamp(o.max_tokens, 2, cfg.value().max_positions);
  const int threads = o.n_threads > 0 ? o.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::unique_ptr<minilm_embedder>(
      new minilm_embedder(std::move(tok.value()), std::move(model.value()), threads, max_tokens, o.weights));
}

std::vector<int32_t> minilm_embedder::token_ids(std::string_view text) const {
  return tokenizer_.encode_for_model(text, static_cast<size_t>(max_tokens_));
}

size_t minilm_embedder::n_tokens(std::string_view text) const { return tokenizer_.encode(text).size() + 2; }

bool minilm_embedder::fits(std::string_view text) const {
  return tokenizer_.encode_for_model(text, static_cast<size_t>(max_tokens_) + 1).size() <= static_cast<size_t>(max_tokens_);
}

result<std::vector<float>> minilm_embedder::embed(std::string_view text) {
  const auto ids = token_ids(text);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto s = model_->forward(ids.data(), static_cast<int>(ids.size()), hidden_, pool_); !s)
    return make_error("minilm embedder: " + s.error());
  const int H = model_->config().hidden;
  std::vector<double> sum(static_cast<size_t>(H), 0.0);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int i = 0; i < H; ++i) sum[static_cast<size_t>(i)] += hidden_[t * H + static_cast<size_t>(i)];
  std::vector<float> v(static_cast<size_t>(H));
  for (int i = 0; i < H; ++i) v[static_cast<size_t>(i)] = static_cast<float>(sum[static_cast<size_t>(i)] / static_cast<double>(ids.size()));
  if (!l2_normalize(v)) return make_error("minilm embedder: the pooled vector is zero");
  return v;
}

void add_minilm_embedder(named_registry<embedder_factory>& r) {
  (void)r.add("minilm", [](const embedder_options& o) -> result<std::unique_ptr<embedder>> {
    auto e = minilm_embedder::load(o);
    if (!e) return make_error(e.error());
    return std::unique_ptr<embedder>(std::move(e.value()));
  });
}

}  // namespace troupe::cache
