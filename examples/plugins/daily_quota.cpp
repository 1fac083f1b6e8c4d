// Shows: a custom admission actor built as a plugin (actors/admission/gate.hpp), with state that
// survives restarts: a daily token quota per tenant. A request reserves prompt + max_tokens of
// its tenant's quota when it is admitted; when its stream closes, the reservation gives way to
// what it used (prompt and generated tokens), and the day's use goes to a file, replaced whole
// (write, fsync, rename, fsync the directory), so a restarted server, or a new actor after a hot
// reload, reads it back. Writes are batched: the first close marks the counts dirty and a flush
// follows 50 ms later (and when the actor stops). The actor runs on a thread of its own
// (detached), so the disk never holds up admission's other work. A request that would go over
// is refused `rate_limited` with a retry hint at the next UTC midnight, when every count starts
// over. It replaces token_bucket: the [admission.tenants] rates do not apply under it.
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

#include <fcntl.h>
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/plugins/plugin_api.hpp"
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

// The quota's books: plain state, no CAF.
class quota_books {
 public:
  explicit quota_books(quota_options o) : o_(std::move(o)) { read(); }

  admission_verdict admit(const admission_ask& a) {
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

  // Also for requests admitted before this actor took over: their use counts all the same.
  void on_closed(const admission_usage& u) {
    roll_over();
    if (auto it = reservations_.find(u.id); it != reservations_.end()) {
      reserved_[it->second.tenant] -= it->second.tokens;
      reservations_.erase(it);
    }
    used_[u.tenant] += static_cast<int64_t>(u.prompt_tokens) + u.completion_tokens;
    dirty_ = true;
  }

  bool dirty() const { return dirty_; }

  void flush() {
    if (!dirty_) return;
    dirty_ = false;
    write();
  }

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
    const std::string text = out.str();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    for (size_t done = 0; ok && done < text.size();) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n <= 0) ok = false;
      else done += static_cast<size_t>(n);
    }
    ok = ok && ::fsync(fd) == 0;  // the data is on disk before the name points at it
    if (fd >= 0) ::close(fd);
    if (!ok) {
      std::fprintf(stderr, "daily_quota: cannot write %s; today's use is kept in memory only\n", tmp.c_str());
      return;
    }
    std::filesystem::rename(tmp, p, ec);
    if (ec) {
      std::fprintf(stderr, "daily_quota: cannot replace %s: %s\n", o_.path.c_str(), ec.message().c_str());
      return;
    }
    // And the rename itself survives a crash.
    const std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

  quota_options o_;
  int64_t day_ = 0;
  std::unordered_map<std::string, int64_t> used_;      // today, by tenant: closed requests
  std::unordered_map<std::string, int64_t> reserved_;  // by tenant: requests still running
  std::unordered_map<uint64_t, reservation> reservations_;
  bool dirty_ = false;
};

// The actor: the admission protocol, plus a flush timer of its own.
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using quota_actor = admission_gate::extend<caf::reacts_to<flush_atom>>;

struct quota_actor_state {
  std::shared_ptr<quota_books> books;  // shared with the exit hook that writes the last counts
  bool flush_pending = false;
  static inline const char* name = "daily_quota";
};

quota_actor::behavior_type daily_quota(quota_actor::stateful_pointer<quota_actor_state> self, quota_options o) {
  self->state.books = std::make_shared<quota_books>(std::move(o));
  self->attach_functor([books = self->state.books] { books->flush(); });
  return {
      [=](admit_atom, const admission_ask& a) { return self->state.books->admit(a); },
      [=](closed_atom, const admission_usage& u) {
        auto& st = self->state;
        st.books->on_closed(u);
        if (!st.flush_pending) {
          st.flush_pending = true;
          self->delayed_send(self, std::chrono::milliseconds(50), flush_atom::value);
        }
      },
      [=](flush_atom) {
        self->state.flush_pending = false;
        self->state.books->flush();
      },
  };
}

result<admission_gate_spawner> make_daily_quota(const admission_config& cfg) {
  option_reader rd("admission actor 'daily_quota'", cfg.policy_options);
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
  return admission_gate_spawner([o](caf::actor_system& sys) -> admission_gate {
    return sys.spawn<caf::detached>(daily_quota, o);  // its own thread: file writes block
  });
}

}  // namespace

TROUPE_PLUGIN_ABI()

TROUPE_PLUGIN_ENTRY int troupe_plugin_register(troupe_plugin_host* host) {
  host->add_admission_actor("daily_quota", make_daily_quota);
  return 0;
}
