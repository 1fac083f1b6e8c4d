// Shows: a scheduling policy written outside the tree, registered by name, and chosen by the
// pipeline's config like the built-in ones. This one serves the newest request first (LIFO),
// which makes its effect easy to see: with one sequence at a time, requests finish in reverse.
//   example_custom_policy [model.gguf]
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <string>
#include <vector>

#include "actors/client.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "actors/scheduler/policy.hpp"
#include "model/llama_model.hpp"

using namespace troupe;
using namespace troupe::actors;
using namespace std::chrono_literals;

namespace {

class newest_first final : public scheduling_policy {
 public:
  std::string name() const override { return "newest_first"; }
  bool before(const seq_view& a, const seq_view& b, int64_t) const override {
    return a.arrival_us != b.arrival_us ? a.arrival_us > b.arrival_us : a.id > b.id;
  }
};

result<std::unique_ptr<scheduling_policy>> make_newest_first(const policy_options& o) {
  if (auto s = check_policy_keys("newest_first", o, {}); !s) return make_error(s.error());
  return std::unique_ptr<scheduling_policy>(new newest_first);
}

}  // namespace

int main(int argc, char** argv) {
  // Registered before any pipeline starts; a name already taken stops the program here.
  if (auto s = scheduling_policy_registry().add("newest_first", make_newest_first); !s) {
    std::fprintf(stderr, "%s\n", s.error().c_str());
    return 1;
  }
  const std::string path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  auto m = model::llama_model::load(path);
  if (!m) {
    std::fprintf(stderr, "%s\n(fetch the model with scripts/fetch-model.sh, or pass a GGUF file)\n", m.error().c_str());
    return 0;
  }
  runtime rt;
  pipeline_config cfg;
  cfg.scheduler.policy = "newest_first";  // any name in the registry
  cfg.scheduler.max_num_seqs = 1;
  cfg.cache.enabled = false;  // every request must reach the scheduler for the order to show
  auto p = pipeline::start(rt.system(), cfg, m.value(), model::backend_options{});
  if (!p) {
    std::fprintf(stderr, "%s\n", p.error().c_str());
    return 1;
  }
  client c(**p);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> order;  // admission ids, in the order the requests finished
  for (int i = 0; i < 4; ++i) {
    request_spec s;
    s.prompt = "Request " + std::to_string(i) + ":";
    s.max_tokens = 8;
    c.submit(s, [&](const event& e) {
      if (std::holds_alternative<token_event>(e)) return;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(std::holds_alternative<done_event>(e) ? std::get<done_event>(e).request_id : 0);
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, 120s, [&] { return order.size() == 4; });
  std::printf("requests (numbered in order of arrival) finished in this order:");
  for (auto id : order) std::printf(" %llu", static_cast<unsigned long long>(id));
  std::printf("\n(the first runs at once; the others queue behind it and run newest first)\n");
  return 0;
}
