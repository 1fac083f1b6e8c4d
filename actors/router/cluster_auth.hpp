#pragma once
// How a worker proves it knows the cluster's secret without sending it: it sends a fresh nonce
// ("<unix seconds>-<random hex>") and HMAC-SHA256(secret, nonce). The router accepts a nonce
// once, and only within nonce_window_s of its own clock, so a recorded join cannot be replayed.
// The links themselves are not encrypted (docs/cluster.md says what that means and when plain
// TCP is acceptable: loopback, or a network you trust with the cluster's traffic).
#include <cstdint>
#include <deque>
#include <set>
#include <string>

#include "common/result.hpp"

namespace troupe::actors {

inline constexpr int64_t nonce_window_s = 120;

// Nonces already accepted (bounded: older ones are outside the window anyway).
struct nonce_book {
  std::set<std::string> seen;
  std::deque<std::string> order;
};

int64_t wall_clock_s();
std::string make_nonce(int64_t now_s);
// Lower-case hex of HMAC-SHA256(secret, nonce).
std::string make_proof(const std::string& secret, const std::string& nonce);
// Ok when no secret is set, or the proof is right for a fresh nonce (which is then remembered);
// else an error saying what was wrong (never the secret).
status check_proof(const std::string& secret, const std::string& nonce, const std::string& proof, nonce_book& book,
                   int64_t now_s);

}  // namespace troupe::actors
