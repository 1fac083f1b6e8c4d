// Shows: an admission policy built as a plugin, with state that survives restarts: a daily token
// quota per tenant. A request reserves prompt + max_tokens of its tenant's quota when it is
// admitted; when its stream closes, the reservation gives way to what it used (prompt and
// generated tokens), and the day's use goes to a file, replaced whole (write, then rename), so a
// restarted server, or a new policy after a hot reload, reads it back. A request that would go
// over is refused `rate_limited` with a retry hint at the next UTC midnight, when every count
// starts over. It replaces token_bucket: the [admission.tenants] rates do not apply under it.
//
//   plugins = ["build/examples/libtroupe_daily_quota.so"]
//   [admission]
//   policy = "daily_quota"
//   [admission.policy_options]
//   path = "data/quota.tsv"    # required: the day's use (its directory is made on first write)
//   daily_tokens = 100000      # quota of tenants not named; 0: unlimited
//   tokens_alice = 5000        # tokens_<tenant>: that tenant's quota
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>

#include "actors/plugin_api.hpp"
#include "actors/request.hpp"

namespace {

using namespace troupe;
using namespace troupe::actors;

struct quota_options {
  std::string path;
  int64_t daily_tokens = 0;
  std::map<std::string, int64_t> by_tenant;
};

int64_t utc_day(int64_t unix_s) { return unix_s / 86400; }

int64_t unix_now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class daily_quota final : public admission_policy {
 public:
  explicit daily_quota(quota_options o) : o_(std::move(o)) { read(); }

  std::string name() const override { return "daily_quota"; }

  admission_verdict admit(const admission_ask& a) override {
    roll_over();
    const int64_t quota = quota_of(a.tenant);
    const auto cost = static_cast<int64_t>(a.cost);
    const int64_t committed = used_[a.tenant] + reserved_[a.tenant];
    if (quota > 0 && committed + cost > quota) {
      const int64_t now = unix_now_s();
      const int64_t to_midnight_ms = ((utc_day(now) + 1) * 86400 - now) * 1000;
      return admission_verdict::refuse(
          errc::rate_limited,
          "tenant '" + a.tenant + "' has used " + std::to_string(committed) + " of its " + std::to_string(quota) +
              " tokens today; this request may take " + std::to_string(cost) +
              " (prompt + max_tokens): lower max_tokens, or retry after midnight UTC",
          to_midnight_ms);
    }
    reserved_[a.tenant] += cost;
    reservations_[a.id] = {a.tenant, cost};
    return admission_verdict::admit();
  }

  // Also for requests admitted before this policy took over: their use counts all the same.
  void on_closed(const admission_usage& u) override {
    roll_over();
    if (auto it = reservations_.find(u.id); it != reservations_.end()) {
      reserved_[it->second.tenant] -= it->second.tokens;
      reservations_.erase(it);
    }
    used_[u.tenant] += static_cast<int64_t>(u.prompt_tokens) + u.completion_tokens;
    write();
  }

  bool reconfigure(const admission_config&) override { return true; }  // it reads no limits

 private:
  struct reservation {
    std::string tenant;
    int64_t tokens = 0;
  };

  int64_t quota_of(const std::string& tenant) const {
    auto it = o_.by_tenant.find(tenant);
    return it == o_.by_tenant.end() ? o_.daily_tokens : it->second;
  }

  void roll_over() {
    const int64_t today = utc_day(unix_now_s());
    if (today == day_) return;
    day_ = today;
    used_.clear();  // reservations stay: those requests are still running
  }

  // The file: "day <n>", then "<tenant>\t<tokens>" per line. A file of another day is ignored.
  void read() {
    day_ = utc_day(unix_now_s());
    std::ifstream in(o_.path);
    std::string line;
    if (!std::getline(in, line) || line != "day " + std::to_string(day_)) return;
    while (std::getline(in, line)) {
      const auto tab = line.rfind('\t');
      if (tab == std::string::npos) continue;
      used_[line.substr(0, tab)] = std::strtoll(line.c_str() + tab + 1, nullptr, 10);
    }
  }

  void write() {
    std::ostringstream out;
    out << "day " << day_ << "\n";
    for (const auto& [tenant, tokens] : used_)
      if (tenant.find_first_of("\t\n") == std::string::npos) out << tenant << '\t' << tokens << '\n';
    std::error_code ec;
    const std::filesystem::path p(o_.path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    const std::string tmp = o_.path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << out.str();
      f.flush();
      if (!f) {
        std::fprintf(stderr, "daily_quota: cannot write %s; today's use is kept in memory only\n", tmp.c_str());
        return;
      }
    }
    std::filesystem::rename(tmp, p, ec);
    if (ec) std::fprintf(stderr, "daily_quota: cannot replace %s: %s\n", o_.path.c_str(), ec.message().c_str());
  }

  quota_options o_;
  int64_t day_ = 0;
  std::unordered_map<std::string, int64_t> used_;      // today, by tenant: closed requests
  std::unordered_map<std::string, int64_t> reserved_;  // by tenant: requests still running
  std::unordered_map<uint64_t, reservation> reservations_;
};

result<std::unique_ptr<admission_policy>> make_daily_quota(const admission_config& cfg) {
  option_reader rd("admission policy 'daily_quota'", cfg.policy_options);
  quota_options o;
  o.path = rd.string("path");
  o.daily_tokens = rd.integer("daily_tokens", 0);
  for (const auto& [tenant, v] : rd.prefixed("tokens_")) {
    if (const auto* n = std::get_if<int64_t>(&v); n && *n >= 0) o.by_tenant[tenant] = *n;
    else rd.fail("tokens_" + tenant, "expected a whole number of tokens >= 0");
  }
  if (o.path.empty()) rd.fail("path", "give the file that keeps the day's use");
  if (o.daily_tokens < 0) rd.fail("daily_tokens", "must be >= 0 (0: unlimited)");
  if (auto s = rd.finish(); !s) return make_error(s.error());
  return std::unique_ptr<admission_policy>(new daily_quota(std::move(o)));
}

}  // namespace

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_admission_policy("daily_quota", make_daily_quota);
  return 0;
}
