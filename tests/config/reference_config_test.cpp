// config/reference.toml is the documentation of every key: it must parse, hold exactly the
// built-in defaults, name every key of the schema (and nothing else), and say of each key
// whether it is hot or needs a restart as the schema does. config/troupe.toml must be valid.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "config/config_diff.hpp"
#include "config/config_loader.hpp"
#include "config/config_schema.hpp"
#include "tests/support/test_paths.hpp"

namespace troupe::config {
namespace {

std::string repo_file(const std::string& rel) { return troupe::test::fixture("../../" + rel); }

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_example(const std::string& line) { return line.rfind("#   ", 0) == 0; }

// The examples of reference.toml, as one document.
std::string examples(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (is_example(line)) out += line.substr(4) + "\n";
  return out;
}

// Every leaf key of a document: tables by name, arrays of tables as "[]", empty tables and
// other arrays as leaves.
void flatten(const toml::table& t, const std::string& prefix, std::set<std::string>& out) {
  if (t.empty() && !prefix.empty()) out.insert(prefix);
  for (const auto& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (const auto* sub = v.as_table()) {
      flatten(*sub, key, out);
    } else if (const auto* a = v.as_array(); a && !a->empty() && a->is_array_of_tables()) {
      for (const auto& e : *a) flatten(*e.as_table(), key + "[]", out);
    } else {
      out.insert(key);
    }
  }
}

TEST(ReferenceConfig, ParsesToTheBuiltInDefaults) {
  const std::string path = repo_file("config/reference.toml");
  auto c = load_config(path);
  ASSERT_TRUE(c.ok()) << c.error();
  for (const auto& d : config_diff(troupe_config{}, c.value()))
    ADD_FAILURE() << "reference.toml says " << d.key << " = " << d.new_value << ", the default is " << d.old_value;
}

TEST(ReferenceConfig, NamesEveryKeyOfTheSchemaAndNothingElse) {
  const std::string text = read(repo_file("config/reference.toml"));
  ASSERT_FALSE(text.empty());
  std::set<std::string> present;
  flatten(toml::parse(std::string_view(text), std::string_view("reference.toml")), "", present);
  const std::string ex = examples(text);
  ASSERT_FALSE(ex.empty());
  flatten(toml::parse(std::string_view(ex), std::string_view("reference.toml examples")), "", present);

  // The examples are a valid config (names aside: they may name a plugin's parts).
  config_registries r = config_registries::global();
  r.filters = {};
  r.scheduler_policies = {};
  r.admission_policies = {};
  auto parsed = parse_config(ex, "reference.toml examples", {}, r);
  EXPECT_TRUE(parsed.ok()) << parsed.error();

  std::set<std::string> matched;
  for (const auto& k : present) {
    bool found = false;
    for (const auto& s : config_keys()) {
      if (key_matches(s.key, k)) {
        matched.insert(s.key);
        found = true;
      }
    }
    EXPECT_TRUE(found) << "reference.toml has " << k << ", which the schema does not";
  }
  for (const auto& s : config_keys())
    EXPECT_TRUE(matched.count(s.key)) << "reference.toml does not document " << s.key;
}

// The comment lines right above a key or table header.
TEST(ReferenceConfig, SaysOfEachKeyWhetherItIsHotAsTheSchemaDoes) {
  std::istringstream in(read(repo_file("config/reference.toml")));
  std::string line, table, comment;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty()) {
      comment.clear();
      continue;
    }
    if (line[0] == '#') {
      if (!is_example(line)) comment += line + "\n";
      continue;
    }
    std::string key;
    if (line[0] == '[') {
      table = line.substr(1, line.find(']') - 1);
      key = table;
      bool is_schema_key = false;
      for (const auto& s : config_keys()) is_schema_key = is_schema_key || s.key == key;
      if (!is_schema_key) {  // a section or a fixed sub-table: its keys carry the tags
        comment.clear();
        continue;
      }
    } else {
      const std::string name = line.substr(0, line.find(' '));
      key = table.empty() ? name : table + "." + name;
    }
    const bool hot = comment.find("Hot.") != std::string::npos;
    const bool restart = comment.find("Restart.") != std::string::npos;
    EXPECT_NE(hot, restart) << key << ": its comment should say exactly one of Hot. / Restart.:\n" << comment;
    EXPECT_EQ(hot ? reload_kind::hot : reload_kind::restart, reload_of(key)) << key;
    ++checked;
    comment.clear();
  }
  EXPECT_GT(checked, 60);
}

TEST(DefaultConfig, ServesTheDefaultModelWithTheCacheOn) {
  auto c = load_config(repo_file("config/troupe.toml"));
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->model.path, troupe_config{}.model.path);
  EXPECT_TRUE(c->pipeline.cache.enabled);
  EXPECT_EQ(c->pipeline.cache.policy, "semantic");
}

TEST(DefaultConfig, IsFoundWithoutBeingNamed) {
  // An executable with no config next to it still finds the source tree's.
  const std::string p = default_config_path("/nonexistent/bin/troupe");
  ASSERT_FALSE(p.empty());
  EXPECT_NE(p.find("config/troupe.toml"), std::string::npos);
  EXPECT_TRUE(load_config(p).ok());
}

}  // namespace
}  // namespace troupe::config
