// config/toml_key_depth: a key of too many dotted parts is refused before toml++ sees it (its
// recursion overflowed the stack at 50,000 parts); strings, comments, floats and ordinary keys
// pass; the loader and --set give the error.
#include <gtest/gtest.h>

#include <string>

#include "config/config_loader.hpp"
#include "config/detail/toml_key_depth.hpp"

using troupe::config::detail::key_depth_error;
using troupe::config::detail::max_key_parts;

namespace {
std::string parts(int n, const char* sep = ".") {
  std::string k = "a";
  for (int i = 1; i < n; ++i) k += std::string(sep) + "a";
  return k;
}
}  // namespace

TEST(toml_key_depth, ordinary_documents_pass) {
  EXPECT_FALSE(key_depth_error("[scheduler.speculative]\nk = 4\nx = 1.5\nt = 07:32:00.999\n", "t.toml"));
  EXPECT_FALSE(key_depth_error("a = [1.5, 2.5, 3.5, 4.5]\n", "t.toml"));
  // Dots inside strings and comments are no key's.
  EXPECT_FALSE(key_depth_error("s = \"" + parts(500) + "\"\n# " + parts(500) + "\nm = '''\n" + parts(500) + "\n'''\n",
                               "t.toml"));
  EXPECT_FALSE(key_depth_error(parts(max_key_parts) + " = 1\n", "t.toml"));
}

TEST(toml_key_depth, too_deep_a_key_is_refused_naming_its_line) {
  auto e = key_depth_error("x = 1\n" + parts(max_key_parts + 1) + " = 1\n", "t.toml");
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("t.toml: line 2"), std::string::npos) << *e;
  // A line-ending backslash in a multi-line string still ends a line.
  auto after = key_depth_error("s = \"\"\"one \\\ntwo\"\"\"\n" + parts(max_key_parts + 1) + " = 1\n", "t.toml");
  ASSERT_TRUE(after);
  EXPECT_NE(after->find("t.toml: line 3"), std::string::npos) << *after;
  EXPECT_TRUE(key_depth_error("[" + parts(50000) + "]\n", "t.toml"));
  EXPECT_TRUE(key_depth_error("a = { " + parts(200, " . ") + " = 1 }\n", "t.toml"));
  EXPECT_TRUE(key_depth_error("\"q\".\"r\"." + parts(100) + " = 1\n", "t.toml"));
}

TEST(toml_key_depth, the_loader_and_set_refuse_it_without_crashing) {
  auto c = troupe::config::parse_config(parts(50000) + " = 1\n", "deep.toml", {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("deep.toml: line 1"), std::string::npos) << c.error();
  auto set = troupe::config::parse_set("server." + parts(50000) + "=1");
  ASSERT_TRUE(set.ok());
  auto o = troupe::config::parse_config("", "t.toml", {set.value()});
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.error().find("dotted parts"), std::string::npos) << o.error();
}
