// The driver the normal (gcc) build links each fuzz target against instead of libFuzzer.
//
//   <target>_replay CORPUS...                       runs every file under the directories (or the
//                                                   files) once, in name order: the ctest
//                                                   fuzz.<target> replays the corpus as a
//                                                   regression test
//   <target>_replay --mutate SECONDS [--seed N] CORPUS...
//                                                   then, for SECONDS, runs mutants of the corpus
//                                                   inputs: the ctest fuzz.<target>.mutate, CI's
//                                                   short fuzz pass
//
// A crash or a broken invariant aborts (fuzz_check.hpp), which fails the test. An empty corpus is
// an error: a test that replays nothing would pass while checking nothing.
//
// Why a mutator of our own and not libFuzzer: libFuzzer needs clang and the `fuzz` build (a third
// build of the tree, which CI's time on 2 cores does not allow; see docs/reliability.md). This is
// much weaker: it is blind (no coverage feedback, so it never keeps an input for reaching new
// code, only mutates the seeds), and the normal build has no sanitizers (the asan preset's
// engine targets do). What it does catch is what the seeds are one or a few byte edits away
// from: a crash, an abort, a broken invariant. The sequence of inputs depends only on the seed
// (fixed by default), so a failure recurs on a rerun; the failing input is written to
// ./mutate-crash-<target> before the process dies, to be replayed (and added to the corpus).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
// Under ASan, a report ends the process through its own exit, not a signal: it calls this first.
extern "C" __attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)(void));

namespace fs = std::filesystem;

namespace {

// The input being run, for the crash handler: written out with write(2) only (signal safe).
const std::vector<uint8_t>* g_current = nullptr;
char g_crash_path[512] = "mutate-crash";

void save_current_input() {
  static volatile sig_atomic_t saved = 0;
  if (saved || g_current == nullptr) return;
  saved = 1;
  const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  size_t off = 0;
  while (off < g_current->size()) {
    const ssize_t n = ::write(fd, g_current->data() + off, g_current->size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  static const char msg[] = "mutate: the failing input is saved (see the path above)\n";
  (void)!::write(2, msg, sizeof msg - 1);
}

void on_fatal_signal(int sig) {
  save_current_input();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// A blind, libFuzzer-like mutator: a few stacked edits of one seed, some of them crossing over
// with another seed. Lengths stay under `max_len`.
class mutator {
 public:
  mutator(const std::vector<std::vector<uint8_t>>& seeds, uint64_t seed, size_t max_len)
      : seeds_(seeds), rng_(seed), max_len_(max_len) {}

  void next(std::vector<uint8_t>& out) {
    out = seeds_[pick(seeds_.size())];
    const size_t edits = 1 + pick(4);
    for (size_t i = 0; i < edits; ++i) edit(out);
    if (out.size() > max_len_) out.resize(max_len_);
  }

 private:
  size_t pick(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  void edit(std::vector<uint8_t>& v) {
    switch (pick(8)) {
      case 0:  // flip a bit
        if (!v.empty()) v[pick(v.size())] ^= static_cast<uint8_t>(1u << pick(8));
        break;
      case 1:  // set a byte
        if (!v.empty()) v[pick(v.size())] = static_cast<uint8_t>(rng_());
        break;
      case 2: {  // insert a few bytes, random or repeated
        const size_t at = pick(v.size() + 1), n = 1 + pick(8);
        const uint8_t b = static_cast<uint8_t>(rng_());
        std::vector<uint8_t> ins(n, b);
        if (pick(2)) for (auto& x : ins) x = static_cast<uint8_t>(rng_());
        v.insert(v.begin() + static_cast<std::ptrdiff_t>(at), ins.begin(), ins.end());
        break;
      }
      case 3: {  // erase a range
        if (v.empty()) break;
        const size_t at = pick(v.size()), n = 1 + pick(std::min<size_t>(v.size() - at, 64));
        v.erase(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 4: {  // copy a range of itself elsewhere (repeats a field, a frame, a header)
        if (v.empty()) break;
        const size_t from = pick(v.size()), n = 1 + pick(std::min<size_t>(v.size() - from, 256));
        const std::vector<uint8_t> chunk(v.begin() + static_cast<std::ptrdiff_t>(from),
                                         v.begin() + static_cast<std::ptrdiff_t>(from + n));
        v.insert(v.begin() + static_cast<std::ptrdiff_t>(pick(v.size() + 1)), chunk.begin(), chunk.end());
        break;
      }
      case 5: {  // cross over: a range of another seed, inserted or overwriting
        const auto& o = seeds_[pick(seeds_.size())];
        if (o.empty()) break;
        const size_t from = pick(o.size()), n = 1 + pick(std::min<size_t>(o.size() - from, 256));
        const size_t at = pick(v.size() + 1);
        if (pick(2) || at + n > v.size()) {
          v.insert(v.begin() + static_cast<std::ptrdiff_t>(at), o.begin() + static_cast<std::ptrdiff_t>(from),
                   o.begin() + static_cast<std::ptrdiff_t>(from + n));
        } else {
          std::copy(o.begin() + static_cast<std::ptrdiff_t>(from), o.begin() + static_cast<std::ptrdiff_t>(from + n),
                    v.begin() + static_cast<std::ptrdiff_t>(at));
        }
        break;
      }
      case 6: {  // an interesting integer (lengths, counts, offsets of binary headers), 1-8 bytes LE
        static const uint64_t values[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff, 0x7fffffff,
                                          0x80000000, 0xffffffff, 0x7fffffffffffffffULL, ~0ULL};
        const uint64_t x = values[pick(sizeof values / sizeof values[0])];
        const size_t width = size_t{1} << pick(4);
        if (v.size() < width) break;
        const size_t at = pick(v.size() - width + 1);
        for (size_t i = 0; i < width; ++i) v[at + i] = static_cast<uint8_t>(x >> (8 * i));
        break;
      }
      default: {  // an interesting character of text formats (digits, quotes, separators, escapes)
        static const char chars[] = "0123456789-+.eE\"'\\{}[]:,=#\r\n\t /%&?<>|";
        if (v.empty()) break;
        v[pick(v.size())] = static_cast<uint8_t>(chars[pick(sizeof chars - 1)]);
        break;
      }
    }
  }

  const std::vector<std::vector<uint8_t>>& seeds_;
  std::mt19937_64 rng_;
  size_t max_len_;
};

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: %s [--mutate SECONDS [--seed N]] CORPUS_DIR_OR_FILE...\n";
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  double mutate_seconds = 0;
  uint64_t seed = 1;
  std::vector<fs::path> roots;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--mutate" || a == "--seed") && i + 1 < argc) {
      char* end = nullptr;
      const std::string v = argv[++i];
      if (a == "--mutate") mutate_seconds = std::strtod(v.c_str(), &end);
      else seed = std::strtoull(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || mutate_seconds < 0) {
        std::fprintf(stderr, "replay: %s takes a number, not '%s'\n", a.c_str(), v.c_str());
        return 2;
      }
      continue;
    }
    if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "replay: unknown option '%s'\n", a.c_str());
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
    roots.emplace_back(a);
  }
  if (roots.empty()) {
    std::fprintf(stderr, usage, argv[0]);
    return 2;
  }
  std::vector<fs::path> inputs;
  for (const auto& p : roots) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", p.c_str());
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no input files under the given paths\n");
    return 1;
  }
  std::vector<std::vector<uint8_t>> seeds;
  for (const auto& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    seeds.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", p.c_str(), seeds.back().size());
    LLVMFuzzerTestOneInput(seeds.back().data(), seeds.back().size());
  }
  std::printf("replayed %zu inputs\n", inputs.size());
  if (mutate_seconds <= 0) return 0;

  const std::string target = fs::path(argv[0]).filename().string();
  std::snprintf(g_crash_path, sizeof g_crash_path, "mutate-crash-%s", target.c_str());
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, on_fatal_signal);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_current_input);
  std::fprintf(stderr, "mutate: %s for %.0f s, seed %llu; a failing input goes to %s/%s\n", target.c_str(),
               mutate_seconds, static_cast<unsigned long long>(seed), fs::current_path().c_str(), g_crash_path);
  // 64 KiB, as scripts/fuzz.sh gives libFuzzer (-max_len): a header with a vocabulary, a request
  // with a body; larger seeds are cut when mutated.
  mutator m(seeds, seed, 65536);
  std::vector<uint8_t> input;
  g_current = &input;
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::duration<double>(mutate_seconds);
  uint64_t runs = 0;
  while ((runs & 63) != 0 || std::chrono::steady_clock::now() < until) {
    m.next(input);
    LLVMFuzzerTestOneInput(input.data(), input.size());
    ++runs;
  }
  g_current = nullptr;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("mutated %llu inputs in %.1f s (%.0f/s), seed %llu, no failure\n", static_cast<unsigned long long>(runs),
              secs, static_cast<double>(runs) / secs, static_cast<unsigned long long>(seed));
  return 0;
}
