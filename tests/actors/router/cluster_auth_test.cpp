#include "actors/router/cluster_auth.hpp"

#include <gtest/gtest.h>

using namespace troupe::actors;

namespace {

constexpr int64_t now = 1796400000;

}  // namespace

TEST(ClusterAuth, NoSecretLetsAnyWorkerIn) {
  nonce_book book;
  EXPECT_TRUE(check_proof("", "", "", book, now).ok());
}

TEST(ClusterAuth, TheRightProofForAFreshNonceIsAcceptedOnce) {
  nonce_book book;
  const auto nonce = make_nonce(now);
  const auto proof = make_proof("s3cret", nonce);
  EXPECT_EQ(proof.size(), 64u);  // hex of 32 bytes
  EXPECT_TRUE(check_proof("s3cret", nonce, proof, book, now + 5).ok());
  auto again = check_proof("s3cret", nonce, proof, book, now + 6);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().find("replayed"), std::string::npos) << again.error();
}

TEST(ClusterAuth, AWrongSecretOrNoProofIsRefusedWithoutNamingTheSecret) {
  nonce_book book;
  const auto nonce = make_nonce(now);
  auto wrong = check_proof("s3cret", nonce, make_proof("other", nonce), book, now);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().find("wrong cluster secret"), std::string::npos);
  EXPECT_EQ(wrong.error().find("s3cret"), std::string::npos);
  auto none = check_proof("s3cret", nonce, "", book, now);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("cluster.secret"), std::string::npos);
}

TEST(ClusterAuth, StaleOrMalformedNoncesAreRefused) {
  nonce_book book;
  const auto old = make_nonce(now - nonce_window_s - 10);
  EXPECT_FALSE(check_proof("k", old, make_proof("k", old), book, now).ok());
  EXPECT_FALSE(check_proof("k", "garbage", make_proof("k", "garbage"), book, now).ok());
  // Two fresh nonces differ (random part), so two joins in one second both work.
  const auto a = make_nonce(now), b = make_nonce(now);
  EXPECT_NE(a, b);
  EXPECT_TRUE(check_proof("k", a, make_proof("k", a), book, now).ok());
  EXPECT_TRUE(check_proof("k", b, make_proof("k", b), book, now).ok());
}

TEST(ClusterAuth, TheProofIsHmacSha256) {
  // The well-known example (Wikipedia's HMAC page; Python's hmac module agrees).
  EXPECT_EQ(make_proof("key", "The quick brown fox jumps over the lazy dog"),
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
}
