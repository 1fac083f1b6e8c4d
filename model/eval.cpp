#include "model/eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace troupe::model {

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the logits file is written as the host's floats: little-endian hosts only"
#endif

namespace {

// A window is fed in pieces of at most this many tokens: the same arithmetic as one piece (a
// position's sums depend on n_prompt, not on how steps are cut: backend.hpp), smaller scratch.
constexpr int32_t max_piece = 512;

constexpr char magic[8] = {'T', 'R', 'O', 'U', 'P', 'E', 'L', 'P'};
constexpr int32_t file_version = 1;

// log-softmax in double: the sums over 49152 terms would lose the small probabilities' digits in float.
void log_softmax(const float* logits, int32_t n, float* out) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int32_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(logits[i]) - lse);
}

}  // namespace

result<std::vector<std::vector<int32_t>>> eval_windows(const std::vector<int32_t>& tokens, const eval_options& o) {
  if (o.n_ctx < 8) return make_error("the window (--ctx) must be at least 8 tokens, not " + std::to_string(o.n_ctx));
  if (o.max_chunks < 0) return make_error("the number of windows (--chunks) must be 0 (all) or more, not " +
                                          std::to_string(o.max_chunks));
  int64_t n = static_cast<int64_t>(tokens.size()) / o.n_ctx;
  if (n == 0)
    return make_error("the text has " + std::to_string(tokens.size()) + " tokens: fewer than one window of " +
                      std::to_string(o.n_ctx) + " (use a longer text or a smaller --ctx)");
  if (o.max_chunks > 0) n = std::min<int64_t>(n, o.max_chunks);
  std::vector<std::vector<int32_t>> w;
  for (int64_t c = 0; c < n; ++c) {
    w.emplace_back(tokens.begin() + c * o.n_ctx, tokens.begin() + (c + 1) * o.n_ctx);
    if (o.bos >= 0) w.back()[0] = o.bos;
  }
  return w;
}

status evaluate(backend& be, const std::vector<std::vector<int32_t>>& windows,
                const std::function<status(const eval_chunk&)>& on_chunk) {
  const int32_t n_vocab = be.params().n_vocab;
  for (size_t c = 0; c < windows.size(); ++c) {
    const auto& w = windows[c];
    const auto n_ctx = static_cast<int32_t>(w.size());
    if (n_ctx < 8) return make_error("window " + std::to_string(c) + " has fewer than 8 tokens");
    const int32_t first = n_ctx / 2;  // llama-perplexity scores the second half: each has n_ctx/2 tokens of context
    const int32_t n_blocks = (n_ctx + be.block_size() - 1) / be.block_size();
    if (n_blocks > be.n_blocks())
      return make_error("a window of " + std::to_string(n_ctx) + " tokens needs " + std::to_string(n_blocks) +
                        " KV blocks; the backend has " + std::to_string(be.n_blocks()));
    eval_chunk ch;
    ch.index = static_cast<int32_t>(c);
    ch.n_vocab = n_vocab;
    ch.logprobs.resize(static_cast<size_t>(n_ctx - 1 - first) * n_vocab);
    ch.targets.assign(w.begin() + first + 1, w.end());
    for (int32_t a = 0; a < n_ctx; a += max_piece) {
      const int32_t b = std::min(n_ctx, a + max_piece);
      batch bt;
      batch_sequence s;
      s.seq_id = 0;
      s.tokens.assign(w.begin() + a, w.begin() + b);
      s.n_past = a;
      s.n_prompt = n_ctx;
      for (int32_t i = 0; i < n_blocks; ++i) s.block_table.push_back(i);
      // The scored positions are a suffix of the window, so of every piece that holds any.
      const int32_t lo = std::max(a, first);
      s.want_logits = lo < b;
      s.n_logits = s.want_logits ? b - lo : 1;
      bt.seqs.push_back(std::move(s));
      auto out = be.forward(bt);
      if (!out) return make_error("window " + std::to_string(c) + ": " + out.error());
      if (!bt.seqs[0].want_logits) continue;
      for (int32_t p = lo; p < b && p < n_ctx - 1; ++p)  // the last position predicts past the window
        log_softmax(out->row(static_cast<size_t>(p - lo)), n_vocab,
                    ch.logprobs.data() + static_cast<size_t>(p - first) * n_vocab);
    }
    if (auto st = on_chunk(ch); !st) return st;
  }
  return {};
}

void ppl_accumulator::add(const eval_chunk& c) {
  for (size_t i = 0; i < c.targets.size(); ++i) nll_ -= c.row(i)[c.targets[i]];
  n_ += static_cast<int64_t>(c.targets.size());
}

double ppl_accumulator::ppl() const { return n_ ? std::exp(mean_nll()) : 0.0; }

status kl_accumulator::add(const eval_chunk& r, const eval_chunk& t) {
  if (r.index != t.index || r.n_vocab != t.n_vocab || r.targets != t.targets)
    return make_error("the runs compared are not of the same windows (window " + std::to_string(r.index) + " vs " +
                      std::to_string(t.index) + ", vocabulary " + std::to_string(r.n_vocab) + " vs " +
                      std::to_string(t.n_vocab) + ")");
  for (size_t i = 0; i < r.targets.size(); ++i) {
    const float* lr = r.row(i);
    const float* lt = t.row(i);
    double kl = 0.0;
    for (int32_t v = 0; v < r.n_vocab; ++v) kl += std::exp(static_cast<double>(lr[v])) * (static_cast<double>(lr[v]) - lt[v]);
    kl_.push_back(std::max(0.0, kl));  // a sum of exactly equal rows may round to -1e-17
    if (std::max_element(lr, lr + r.n_vocab) - lr == std::max_element(lt, lt + t.n_vocab) - lt) ++same_top1_;
  }
  ref_.add(r);
  test_.add(t);
  return {};
}

kl_summary kl_accumulator::summary() const {
  kl_summary s;
  s.n_tokens = static_cast<int64_t>(kl_.size());
  if (kl_.empty()) return s;
  double sum = 0.0;
  for (double k : kl_) sum += k;
  s.mean_kl = sum / static_cast<double>(kl_.size());
  auto sorted = kl_;
  std::sort(sorted.begin(), sorted.end());
  // Nearest rank: the smallest value with at least 99% of the tokens at or below it.
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(sorted.size())));
  s.p99_kl = sorted[std::max<size_t>(rank, 1) - 1];
  s.max_kl = sorted.back();
  s.top1_agreement = static_cast<double>(same_top1_) / static_cast<double>(kl_.size());
  s.ppl_reference = ref_.ppl();
  s.ppl_test = test_.ppl();
  return s;
}

// ---- the reference run's file

result<logits_writer> logits_writer::open(const std::string& path, int32_t n_vocab,
                                          const std::vector<std::vector<int32_t>>& windows) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return make_error("cannot write '" + path + "': " + std::strerror(errno));
  logits_writer w(f, path);
  const int32_t head[4] = {file_version, n_vocab, windows.empty() ? 0 : static_cast<int32_t>(windows[0].size()),
                           static_cast<int32_t>(windows.size())};
  bool ok = std::fwrite(magic, 1, sizeof magic, f) == sizeof magic && std::fwrite(head, sizeof head, 1, f) == 1;
  for (const auto& win : windows) ok = ok && std::fwrite(win.data(), sizeof(int32_t), win.size(), f) == win.size();
  if (!ok) return make_error("cannot write '" + path + "'");
  return w;
}

logits_writer::logits_writer(logits_writer&& o) noexcept : f_(o.f_), path_(std::move(o.path_)) { o.f_ = nullptr; }
logits_writer::~logits_writer() {
  if (f_) std::fclose(f_);
}

status logits_writer::write(const eval_chunk& c) {
  if (!f_) return make_error("'" + path_ + "' is closed");
  if (std::fwrite(c.logprobs.data(), sizeof(float), c.logprobs.size(), f_) != c.logprobs.size())
    return make_error("cannot write '" + path_ + "' (disk full?)");
  return {};
}

status logits_writer::close() {
  if (!f_) return {};
  const bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  if (!ok) return make_error("cannot write '" + path_ + "'");
  return {};
}

result<logits_reader> logits_reader::open(const std::string& path, int32_t n_vocab,
                                          const std::vector<std::vector<int32_t>>& windows) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return make_error("cannot read '" + path + "': " + std::strerror(errno));
  logits_reader r(f, path, n_vocab, windows);
  char m[8];
  int32_t head[4];
  if (std::fread(m, 1, sizeof m, f) != sizeof m || std::memcmp(m, magic, sizeof m) != 0 ||
      std::fread(head, sizeof head, 1, f) != 1)
    return make_error("'" + path + "' is not a logits file of `troupe eval --save-logits`");
  if (head[0] != file_version)
    return make_error("'" + path + "' is a logits file of version " + std::to_string(head[0]) + "; this troupe reads " +
                      std::to_string(file_version));
  if (head[1] != n_vocab)
    return make_error("'" + path + "' holds rows of " + std::to_string(head[1]) + " tokens; this model has " +
                      std::to_string(n_vocab) + " (another model?)");
  const int32_t n_ctx = windows.empty() ? 0 : static_cast<int32_t>(windows[0].size());
  if (head[2] != n_ctx || head[3] != static_cast<int32_t>(windows.size()))
    return make_error("'" + path + "' was written for " + std::to_string(head[3]) + " windows of " +
                      std::to_string(head[2]) + " tokens; this run has " + std::to_string(windows.size()) + " of " +
                      std::to_string(n_ctx) + " (give the same --ctx and --chunks)");
  std::vector<int32_t> toks(static_cast<size_t>(n_ctx));
  for (const auto& w : windows) {
    if (std::fread(toks.data(), sizeof(int32_t), toks.size(), f) != toks.size())
      return make_error("'" + path + "' ends inside its tokens");
    if (toks != w) return make_error("'" + path + "' was written for another text (its tokens differ)");
  }
  return r;
}

logits_reader::logits_reader(logits_reader&& o) noexcept
    : f_(o.f_), path_(std::move(o.path_)), n_vocab_(o.n_vocab_), windows_(std::move(o.windows_)), next_(o.next_) {
  o.f_ = nullptr;
}
logits_reader::~logits_reader() {
  if (f_) std::fclose(f_);
}

result<eval_chunk> logits_reader::next() {
  if (next_ >= static_cast<int32_t>(windows_.size())) return make_error("'" + path_ + "' has no more windows");
  const auto& w = windows_[static_cast<size_t>(next_)];
  const auto first = static_cast<int32_t>(w.size()) / 2;
  eval_chunk c;
  c.index = next_++;
  c.n_vocab = n_vocab_;
  c.targets.assign(w.begin() + first + 1, w.end());
  c.logprobs.resize(c.targets.size() * static_cast<size_t>(n_vocab_));
  if (std::fread(c.logprobs.data(), sizeof(float), c.logprobs.size(), f_) != c.logprobs.size())
    return make_error("'" + path_ + "' ends inside window " + std::to_string(c.index));
  // A log-probability is never NaN nor above 0 (a damaged or foreign file: its KL figures would
  // read as 0, a perfect match).
  for (size_t i = 0; i < c.logprobs.size(); ++i)
    if (!(c.logprobs[i] <= 1e-3f))
      return make_error("'" + path_ + "' window " + std::to_string(c.index) + " holds " +
                        std::to_string(c.logprobs[i]) + " at value " + std::to_string(i) +
                        ": not a log-probability (NaN or above 0)");
  return c;
}

}  // namespace troupe::model
