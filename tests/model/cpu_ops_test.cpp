// The element-wise ops against their definitions in double. They follow ggml's float order (so
// that greedy decoding reproduces llama.cpp's); these tests pin down that they still compute the
// right function, to float accuracy, including the rare paths (tails, huge arguments).
#include "model/cpu_ops.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace troupe::model;

namespace {

std::vector<float> random_floats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST(CpuOps, RmsNormMatchesDefinition) {
  const int n = 576;
  auto x = random_floats(n, -3.0f, 3.0f, 1);
  x[7] = 2.0e4f;  // an outlier feature, as SmolLM2's residual stream carries
  auto w = random_floats(n, 0.5f, 1.5f, 2);
  std::vector<float> y(n);
  rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i] * scale * w[i], 1e-6 * std::fabs(x[i] * scale * w[i]) + 1e-7) << i;
}

// The fast order's norm: the same definition, its squares summed in lanes (lengths that are not
// a multiple of 16 or 8 take the scalar tails), and within a few float ulps of ggml's chain.
TEST(CpuOps, RmsNormFastMatchesDefinitionAndTheChain) {
  for (int n : {576, 64, 100, 7}) {
    auto x = random_floats(n, -3.0f, 3.0f, 3);
    x[static_cast<size_t>(n / 2)] = 2.0e4f;
    auto w = random_floats(n, 0.5f, 1.5f, 4);
    std::vector<float> y(static_cast<size_t>(n)), chain(static_cast<size_t>(n));
    rms_norm_fast(x.data(), w.data(), y.data(), n, 1e-5f);
    rms_norm(x.data(), w.data(), chain.data(), n, 1e-5f);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      const double want = x[i] * scale * w[i];
      EXPECT_NEAR(y[i], want, 1e-6 * std::fabs(want) + 1e-7) << "n " << n << " i " << i;
      EXPECT_NEAR(y[i], chain[i], 4e-7 * std::fabs(chain[i]) + 1e-9) << "n " << n << " i " << i;
    }
  }
}

TEST(CpuOps, RopeTableMatchesPowFormula) {
  const int n_rot = 64;
  std::vector<float> c(n_rot / 2), s(n_rot / 2);
  for (int32_t pos : {0, 1, 17, 1000, 8191}) {
    rope_table(pos, n_rot, 100000.0f, 1.0f, c.data(), s.data());
    for (int i = 0; i < n_rot / 2; ++i) {
      const double theta = pos * std::pow(100000.0, -2.0 * i / n_rot);
      // the running float product drifts by a few ulps of theta, which is up to ~8e3 here
      const double tol = 1e-6 * (1.0 + theta);
      EXPECT_NEAR(c[i], std::cos(theta), tol) << pos << " " << i;
      EXPECT_NEAR(s[i], std::sin(theta), tol) << pos << " " << i;
    }
  }
}

TEST(CpuOps, SiluMulMatchesDefinitionIncludingTailAndHugeArguments) {
  const int64_t n = 1536 + 5;  // a tail the vector loop does not cover
  auto g = random_floats(static_cast<size_t>(n), -12.0f, 12.0f, 3);
  auto up = random_floats(static_cast<size_t>(n), -2.0f, 2.0f, 4);
  g[3] = 95.0f;     // exp(-g) underflows to a subnormal: the per-lane path
  g[4] = -95.0f;    // exp(-g) overflows: silu -> -0
  g[5] = 200.0f;    // beyond ggml's saturation
  g[6] = -200.0f;
  g[7] = 0.0f;
  auto out = g;
  silu_mul(out.data(), up.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[static_cast<size_t>(i)];
    const double want = x / (1.0 + std::exp(-x)) * up[static_cast<size_t>(i)];
    EXPECT_NEAR(out[static_cast<size_t>(i)], want, 2e-6 * std::fabs(want) + 1e-30) << i << " x=" << x;
  }
}

TEST(CpuOps, ExpSumMatchesExpAndSumsEveryValue) {
  for (int64_t n : {1, 15, 16, 17, 40, 256, 1000}) {
    auto x = random_floats(static_cast<size_t>(n), -30.0f, 5.0f, static_cast<unsigned>(n));
    x[0] = -INFINITY;  // a masked score
    std::vector<float> y(static_cast<size_t>(n));
    const double sum = exp_sum(x.data(), 5.0f, y.data(), n);
    double want_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      // the argument is rounded to float first (x - shift), as ggml's softmax does
      const double want = std::exp(static_cast<double>(x[static_cast<size_t>(i)] - 5.0f));
      want_sum += want;
      EXPECT_NEAR(y[static_cast<size_t>(i)], want, 3e-7 * want) << n << " " << i;
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum + 1e-30) << n;
  }
}

TEST(CpuOps, ExpSumSaturatesLikeGgml) {
  // |x / ln2| > 126 takes the per-lane path; beyond 192 ggml saturates to 0 / inf.
  const float x[5] = {-150.0f, -95.0f, 88.5f, 150.0f, 80.0f};
  float y[5];
  exp_sum(x, 0.0f, y, 5);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_NEAR(y[1], std::exp(-95.0), 1e-3 * std::exp(-95.0));  // subnormal: fewer bits
  EXPECT_NEAR(y[2], std::exp(88.5), 1e-6 * std::exp(88.5));
  EXPECT_TRUE(std::isinf(y[3]));
  EXPECT_NEAR(y[4], std::exp(80.0), 1e-6 * std::exp(80.0));
}

TEST(CpuOps, ArgmaxIsStdMaxElementsFirstMaximum) {
  for (int64_t n : {1, 7, 8, 9, 31, 49152}) {
    auto x = random_floats(static_cast<size_t>(n), -40.0f, -1.0f, static_cast<unsigned>(n) + 3);
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      auto y = x;
      y[static_cast<size_t>(at)] = 0.5f;
      if (at + 3 < n) y[static_cast<size_t>(at + 3)] = 0.5f;  // a tie later: the first one wins
      const auto want = std::max_element(y.begin(), y.end()) - y.begin();
      EXPECT_EQ(argmax(y.data(), n), want) << n << " " << at;
      EXPECT_EQ(max_value(y.data(), n), 0.5f) << n << " " << at;
    }
  }
  std::vector<float> nan_inside = {1.0f, NAN, 3.0f, 2.0f, NAN, -1.0f, 0.0f, 2.5f, 3.0f, NAN};
  EXPECT_EQ(argmax(nan_inside.data(), 10), 2);
  EXPECT_EQ(max_value(nan_inside.data(), 10), 3.0f);
  std::vector<float> neg_inf(20, -INFINITY);
  neg_inf[13] = -1e30f;
  EXPECT_EQ(argmax(neg_inf.data(), 20), 13);
}
