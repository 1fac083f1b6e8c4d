// The cuda backend through the backend registry. Where no GPU exists (CI) the backend must
// refuse to start with "no CUDA device: <reason>", not crash; where one exists, its logits and
// greedy tokens must match the cpu backend's on a small synthetic model, with and without graphs.
// Built only with nvcc (TROUPE_HAVE_CUDA).
#ifdef TROUPE_HAVE_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gpu/cuda_backend.hpp"
#include "gpu/device_info.hpp"
#include "model/backend.hpp"
#include "tests/support/synthetic_model.hpp"

using namespace troupe;

namespace {

std::shared_ptr<model::llama_model> small_model(const std::string& arch = "llama") {
  test::synthetic_options o;
  o.arch = arch;
  o.matrix_type = model::ggml_type::f16;
  o.embd_type = model::ggml_type::f16;
  auto m = model::llama_model::load(test::make_synthetic_file(o));
  if (!m) throw std::runtime_error(m.error());
  return m.value();
}

bool have_device() { return gpu::query_devices().count > 0; }

// What troupe's main does at startup: the program that links troupe_gpu adds the cuda backend to
// the registry (once; a second add would be refused as a taken name).
void add_cuda_backend_once() {
  static const status added = gpu::add_cuda_backend(model::backend_registry());
  ASSERT_TRUE(added.ok()) << added.error();
}

}  // namespace

TEST(CudaBackend, IsRegistered) {
  add_cuda_backend_once();
  const auto names = model::backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
}

TEST(CudaBackend, WithoutDeviceFailsWithClearError) {
  if (have_device()) GTEST_SKIP() << "a CUDA device is present";
  add_cuda_backend_once();
  auto r = model::make_backend("cuda", small_model(), {});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().rfind("no CUDA device: ", 0), 0u) << r.error();
  EXPECT_GT(r.error().size(), std::string("no CUDA device: ").size()) << "the runtime's reason is missing";
}

// ---- on a GPU only ----------------------------------------------------------------------

namespace {

struct step_out {
  std::vector<float> logits;
  std::vector<int32_t> greedy;
};

// Two sequences: a 37-token prompt and a 5-token prompt, then 6 greedy decode steps.
std::vector<step_out> run(model::backend& be) {
  std::vector<model::batch_sequence> seqs(2);
  const int per = 4;
  for (int i = 0; i < 2; ++i) {
    seqs[static_cast<size_t>(i)].seq_id = static_cast<uint64_t>(i);
    for (int b = 0; b < per; ++b) seqs[static_cast<size_t>(i)].block_table.push_back((1 - i) * per + b);  // reversed
  }
  for (int j = 0; j < 37; ++j) seqs[0].tokens.push_back((j * 13 + 5) % 260);
  for (int j = 0; j < 5; ++j) seqs[1].tokens.push_back((j * 29 + 1) % 260);
  std::vector<step_out> out;
  for (int step = 0; step < 7; ++step) {
    model::batch b;
    b.seqs = seqs;
    auto r = be.forward(b);
    EXPECT_TRUE(r) << r.error();
    if (!r) return out;
    step_out so;
    so.logits = r->data;
    for (size_t i = 0; i < 2; ++i) {
      const float* row = r->row(i);
      so.greedy.push_back(static_cast<int32_t>(std::max_element(row, row + r->n_vocab) - row));
      seqs[i].n_past += static_cast<int32_t>(seqs[i].tokens.size());
      seqs[i].tokens = {so.greedy.back()};
    }
    out.push_back(std::move(so));
  }
  return out;
}

}  // namespace

TEST(CudaBackend, MatchesCpuWithAndWithoutGraphs) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  for (const char* arch : {"llama", "qwen2"}) {
    auto m = small_model(arch);
    auto cpu = model::make_backend("cpu", m, {});
    ASSERT_TRUE(cpu) << cpu.error();
    const auto want = run(*cpu.value());
    for (bool graphs : {false, true}) {
      gpu::cuda_options co;
      co.graphs = graphs;
      auto cuda = gpu::cuda_backend::create(m, {}, co);
      ASSERT_TRUE(cuda) << cuda.error();
      const auto got = run(*cuda.value());
      ASSERT_EQ(got.size(), want.size());
      for (size_t s = 0; s < want.size(); ++s) {
        float mx = 0.0f;
        for (size_t i = 0; i < want[s].logits.size(); ++i)
          mx = std::max(mx, std::fabs(want[s].logits[i] - got[s].logits[i]));
        EXPECT_LT(mx, 0.05f) << arch << " step " << s << " graphs " << graphs;
        EXPECT_EQ(got[s].greedy, want[s].greedy) << arch << " step " << s << " graphs " << graphs;
      }
      auto g = cuda.value()->greedy_last();
      ASSERT_TRUE(g) << g.error();
      ASSERT_EQ(g->size(), 2u);
    }
  }
}

TEST(CudaBackend, DeviceSamplingMatchesHostSampler) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  auto cuda = gpu::cuda_backend::create(small_model(), {}, {});
  ASSERT_TRUE(cuda) << cuda.error();
  model::batch b;
  b.seqs.resize(3);
  for (int i = 0; i < 3; ++i) {
    b.seqs[static_cast<size_t>(i)].seq_id = static_cast<uint64_t>(i);
    b.seqs[static_cast<size_t>(i)].block_table = {i};
    b.seqs[static_cast<size_t>(i)].tokens = {10 + i, 20 + i, 30 + i};
  }
  auto r = cuda.value()->forward(b);
  ASSERT_TRUE(r) << r.error();
  for (uint64_t seed : {1ull, 2ull, 99ull}) {
    std::vector<model::sampling_params> ps(3);
    ps[0].temperature = 0.0f;
    ps[1].temperature = 0.8f;
    ps[1].top_k = 40;
    ps[1].top_p = 0.9f;
    ps[2].temperature = 1.5f;
    ps[2].top_k = 64;
    for (auto& p : ps) p.seed = seed;
    const std::vector<int64_t> n_gen = {0, 3, 7};
    auto got = cuda.value()->sample_last(ps, n_gen);
    ASSERT_TRUE(got) << got.error();
    for (size_t i = 0; i < 3; ++i) {
      const auto want = model::sample_token(r->row(i), r->n_vocab, ps[i], {}, n_gen[i]);
      EXPECT_EQ((*got)[i].token, want.token) << "row " << i << " seed " << seed;
      EXPECT_NEAR((*got)[i].logprob, want.logprob, 1e-3f);
    }
  }
}

TEST(CudaBackend, BadBatchIsAnErrorValue) {
  if (!have_device()) GTEST_SKIP() << "no CUDA device";
  add_cuda_backend_once();
  auto cuda = model::make_backend("cuda", small_model(), {});
  ASSERT_TRUE(cuda) << cuda.error();
  model::batch b;
  b.seqs.resize(1);
  b.seqs[0].tokens = {1, 2, 3};
  auto r = cuda.value()->forward(b);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("block table covers"), std::string::npos) << r.error();
}

#endif  // TROUPE_HAVE_CUDA
