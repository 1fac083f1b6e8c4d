#include "bench/llama_runner.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <regex>
#include <sstream>

namespace troupe::bench {

namespace {

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// A row of llama-bench's CSV output.
struct llama_bench_row {
  int n_prompt = 0, n_gen = 0, n_depth = 0;
  llama_test t;
};

std::vector<llama_bench_row> parse_llama_bench_csv(const std::string& out) {
  // CSV rows end with ...,n_prompt,n_gen,n_depth,...,avg_ts,stddev_ts; find the header to index columns.
  std::istringstream ss(out);
  std::string line;
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::string cur;
    bool q = false;
    for (char c : s) {
      if (c == '"') q = !q;
      else if (c == ',' && !q) { v.push_back(cur); cur.clear(); }
      else cur += c;
    }
    v.push_back(cur);
    return v;
  };
  std::vector<std::string> cols;
  std::vector<llama_bench_row> rows;
  while (std::getline(ss, line)) {
    auto v = split(line);
    if (cols.empty()) {
      if (std::find(v.begin(), v.end(), "avg_ts") != v.end()) cols = v;
      continue;
    }
    auto col = [&](const char* name) -> std::string {
      auto it = std::find(cols.begin(), cols.end(), name);
      size_t i = static_cast<size_t>(it - cols.begin());
      return it == cols.end() || i >= v.size() ? "" : v[i];
    };
    llama_bench_row r;
    r.n_prompt = std::atoi(col("n_prompt").c_str());
    r.n_gen = std::atoi(col("n_gen").c_str());
    r.n_depth = std::atoi(col("n_depth").c_str());
    r.t = {std::atof(col("avg_ts").c_str()), std::atof(col("stddev_ts").c_str())};
    rows.push_back(r);
  }
  return rows;
}

llama_test find_llama_test(const std::vector<llama_bench_row>& rows, int n_prompt, int n_gen, int n_depth) {
  for (const auto& r : rows)
    if (r.n_prompt == n_prompt && r.n_gen == n_gen && r.n_depth == n_depth) return r.t;
  return {};
}

}  // namespace

llama_figures run_llama(const llama_run& o) {
  llama_figures f;
  const std::string env = "LD_LIBRARY_PATH='" + o.llama_bin + "' ";
  const std::string bench = o.llama_bin + "/llama-bench";
  if (FILE* x = fopen(bench.c_str(), "r")) {
    fclose(x);
  } else {
    f.note = "llama.cpp not built: run scripts/build-llama-cpp.sh to compare";
    return f;
  }
  // llama.cpp's repacked kernels (its AMX ones among them) die with SIGILL on some AMX machines
  // (Xeon model 167: TILELOADD): a short probe first, and without repacking when it fails.
  std::string repack, batched_repack;
  const std::string probe = env + bench + " -m '" + o.model + "' -t " + std::to_string(o.threads) + " -r 1 -p 16 -n 0 -o csv";
  if (parse_llama_bench_csv(run_capture(probe + " 2>/dev/null")).empty() &&
      !parse_llama_bench_csv(run_capture(probe + " --repack 0 2>/dev/null")).empty()) {
    repack = " --repack 0";
    batched_repack = " --no-repack";
    f.note = "llama.cpp ran with --repack 0 (its repacked kernels crashed on this CPU)";
  }
  const std::string common = env + bench + " -m '" + o.model + "' -t " + std::to_string(o.threads) + " -r " +
                             std::to_string(o.repeats) + " -o csv" + repack;
  // pp<prefill_tokens>, pp<long_tokens> and tg<decode_tokens>, each on an empty context.
  std::string p = std::to_string(o.prefill_tokens);
  if (o.long_tokens > 0 && o.long_tokens != o.prefill_tokens) p += "," + std::to_string(o.long_tokens);
  std::fprintf(stderr, "running llama-bench (pp%s, tg%d, %d threads) ...\n", p.c_str(), o.decode_tokens, o.threads);
  auto rows = parse_llama_bench_csv(
      run_capture(common + " -p " + p + " -n " + std::to_string(o.decode_tokens) + " 2>/dev/null"));
  f.pp = find_llama_test(rows, o.prefill_tokens, 0, 0);
  f.tg = find_llama_test(rows, 0, o.decode_tokens, 0);
  if (o.long_tokens > 0) {
    f.long_pp = find_llama_test(rows, o.long_tokens, 0, 0);
    // -d fills the context with that many tokens (untimed) before each timed repetition.
    std::fprintf(stderr, "running llama-bench (tg%d at depth %d) ...\n", o.decode_tokens, o.long_tokens);
    rows = parse_llama_bench_csv(run_capture(common + " -p 0 -n " + std::to_string(o.decode_tokens) + " -d " +
                                             std::to_string(o.long_tokens) + " 2>/dev/null"));
    f.long_tg = find_llama_test(rows, 0, o.decode_tokens, o.long_tokens);
  }

  std::string npl;
  for (int b : o.batches) npl += (npl.empty() ? "" : ",") + std::to_string(b);
  const int ctx = (o.batch_prompt + o.batch_gen) * std::max(1, *std::max_element(o.batches.begin(), o.batches.end())) + 256;
  std::fprintf(stderr, "running llama-batched-bench (%d prompt + %d generated, B = %s) ...\n", o.batch_prompt, o.batch_gen,
               npl.c_str());
  const auto out = run_capture(env + o.llama_bin + "/llama-batched-bench -m '" + o.model + "' -t " + std::to_string(o.threads) +
                    " -tb " + std::to_string(o.threads) + batched_repack + " -c " + std::to_string(ctx) + " -b 2048 -ub 512 -npp " +
                    std::to_string(o.batch_prompt) + " -ntg " + std::to_string(o.batch_gen) + " -npl " + npl + " 2>/dev/null");
  // Table rows: |  PP |  TG |  B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
  std::regex row(R"(^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|)");
  std::istringstream bs(out);
  std::string line;
  while (std::getline(bs, line)) {
    std::smatch m;
    if (std::regex_search(line, m, row)) f.batched.emplace_back(std::stoi(m[3]), std::stod(m[8]));
  }
  if (f.pp.tps == 0 || f.tg.tps == 0 || f.batched.empty() || (o.long_tokens > 0 && (f.long_pp.tps == 0 || f.long_tg.tps == 0)))
    f.note += (f.note.empty() ? "" : "; ") + std::string("could not read some llama.cpp figures");
  return f;
}

}  // namespace troupe::bench
