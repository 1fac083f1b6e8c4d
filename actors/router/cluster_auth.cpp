#include "actors/router/cluster_auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <chrono>
#include <cstdlib>

namespace troupe::actors {

namespace {

std::string hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[p[i] >> 4]);
    out.push_back(digits[p[i] & 15]);
  }
  return out;
}

}  // namespace

int64_t wall_clock_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string make_nonce(int64_t now_s) {
  unsigned char r[16];
  if (RAND_bytes(r, sizeof r) != 1) std::abort();  // no randomness: nothing safe to do
  return std::to_string(now_s) + "-" + hex(r, sizeof r);
}

std::string make_proof(const std::string& secret, const std::string& nonce) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(nonce.data()), nonce.size(), mac, &len);
  return hex(mac, len);
}

status check_proof(const std::string& secret, const std::string& nonce, const std::string& proof, nonce_book& book,
                   int64_t now_s) {
  if (secret.empty()) return {};
  if (proof.empty()) return make_error("it sent no proof of the cluster secret (set cluster.secret on the worker)");
  const auto dash = nonce.find('-');
  char* end = nullptr;
  const long long t = dash == std::string::npos ? 0 : std::strtoll(nonce.substr(0, dash).c_str(), &end, 10);
  if (dash == std::string::npos || t <= 0 || std::llabs(now_s - t) > nonce_window_s)
    return make_error("its nonce is malformed or its clock is more than " + std::to_string(nonce_window_s) +
                      " s off");
  const std::string want = make_proof(secret, nonce);
  if (want.size() != proof.size() || CRYPTO_memcmp(want.data(), proof.data(), want.size()) != 0)
    return make_error("wrong cluster secret");
  if (!book.seen.insert(nonce).second) return make_error("a replayed join (its nonce was used before)");
  book.order.push_back(nonce);
  while (book.order.size() > 4096) {
    book.seen.erase(book.order.front());
    book.order.pop_front();
  }
  return {};
}

}  // namespace troupe::actors
