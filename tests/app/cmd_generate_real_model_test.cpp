// `troupe generate --speculative`, the program itself on SmolLM2-135M: on a copy-heavy greedy
// chat prompt the text is the same as with --speculative off (the engine directly), and the
// timing line says what was proposed and accepted; bad speculative options are errors that name
// the problem, before any model is loaded (so does a --system message without --chat).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.hpp"
#include "tests/support/test_paths.hpp"

namespace {

struct ran {
  int status = -1;
  std::string out, err;
};

// Runs `troupe generate <args>` (args are shell words, quoted by the caller).
ran generate(const std::string& args) {
  troupe::test::temp_dir dir("generate");
  const std::string err_file = dir.str("stderr");
  const std::string cmd = std::string(TROUPE_BIN) + " generate " + args + " 2>" + err_file;
  ran r;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) r.out.append(buf, n);
  const int st = ::pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

const char* copy_prompt =
    "'Copy the following passage exactly, word for word.\n\n"
    "The river runs past the old mill, where the water turns the wheel day and night. In spring the snow "
    "melts in the hills and the river rises, and the miller opens the sluice so the wheel does not break.'";

}  // namespace

TEST(cmd_generate_real_model, speculative_output_is_the_same_and_the_timing_line_counts_guesses) {
  if (!troupe::test::real_model_available()) GTEST_SKIP() << "no model at " << troupe::test::real_model_path();
  const std::string common = "-m " + troupe::test::real_model_path() + " --chat -n 64 --threads 2 -p " + copy_prompt;
  const auto off = generate(common + " --speculative off");
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_EQ(off.err.find("speculative:"), std::string::npos) << off.err;
  for (const std::string method : {"ngram", "suffix"}) {
    const auto spec = generate(common + " --speculative " + method + " --spec-k 5");
    ASSERT_EQ(spec.status, 0) << spec.err;
    EXPECT_EQ(spec.out, off.out) << method;
    std::smatch m;
    const std::regex line(R"(speculative: (\d+) proposed, (\d+) accepted \((\d+)%\)\])");
    ASSERT_TRUE(std::regex_search(spec.err, m, line)) << spec.err;
    const int proposed = std::stoi(m[1]), accepted = std::stoi(m[2]);
    EXPECT_GT(accepted, 10) << method << ": a copied passage is guessed";
    EXPECT_LE(accepted, proposed);
    EXPECT_EQ(std::stoi(m[3]), static_cast<int>(100.0 * accepted / proposed + 0.5));
    std::smatch fo, fs;
    const std::regex finish(R"(\| finish: (\w+))");
    ASSERT_TRUE(std::regex_search(off.err, fo, finish)) << off.err;
    ASSERT_TRUE(std::regex_search(spec.err, fs, finish)) << spec.err;
    EXPECT_EQ(fs[1].str(), fo[1].str()) << method;
  }
}

TEST(cmd_generate_real_model, bad_speculative_options_name_the_problem) {
  const std::string common = "-m /nonexistent.gguf -p hi";
  auto r = generate(common + " --speculative eagle");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--speculative"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("eagle"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ngram"), std::string::npos) << r.err << ": the known methods are listed";
  r = generate(common + " --speculative ngram --spec-k 40");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--spec-k must be in 1..32"), std::string::npos) << r.err;
  r = generate(common + " --spec-k 3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--spec-k needs --speculative"), std::string::npos) << r.err;
  r = generate(common + " --speculative ngram --special");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--special"), std::string::npos) << r.err;
}

TEST(cmd_generate_real_model, a_system_message_without_chat_is_an_error_not_ignored) {
  auto r = generate("-m /nonexistent.gguf -p hi --system 'Answer in French.'");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--system needs --chat"), std::string::npos) << r.err;
}

TEST(cmd_generate_real_model, empty_constraints_and_stops_are_errors_as_in_the_api) {
  const std::string common = "-m /nonexistent.gguf -p hi";
  for (const char* flag : {"--regex", "--choice", "--json-schema", "--grammar"}) {
    auto r = generate(common + " " + flag + " ''");
    EXPECT_EQ(r.status, 1) << flag;
    EXPECT_NE(r.err.find(std::string(flag) + " must not be empty"), std::string::npos) << r.err;
  }
  auto r = generate(common + " --stop ''");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--stop must not be empty"), std::string::npos) << r.err;
  r = generate(common + " --speculative ngram --spec-k 0");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--spec-k must be in 1..32"), std::string::npos) << r.err;
  r = generate(common + " --json-schema /tmp");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("'/tmp' is a directory"), std::string::npos) << r.err;
}
