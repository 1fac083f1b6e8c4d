#pragma once
// The schema table behind config_schema.hpp, with its TOML side: for each key, how it is read
// (type, range, allowed values) into the field of troupe_config that holds it (a field of the
// struct the code reads) and written back. The loader, to_toml and
// config_diff all walk this one table, so a key added here is parsed, printed and diffed.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "config/config_schema.hpp"
#include "config/troupe_config.hpp"

namespace troupe::config::detail {

// Reads values out of one parsed document, collecting every error (each names where it is, the
// full key and what is wrong) instead of stopping at the first.
class reader {
 public:
  explicit reader(std::string source) : source_(std::move(source)) {}

  void fail(const toml::source_region& at, const std::string& key, const std::string& message);
  void fail(const toml::node& n, const std::string& key, const std::string& message) { fail(n.source(), key, message); }
  // Where an error about `key` is: the node it was read from, or the document.
  void fail_key(const std::string& key, const std::string& message);

  std::optional<int64_t> integer(const toml::node& n, const std::string& key, int64_t lo, int64_t hi);
  std::optional<double> number(const toml::node& n, const std::string& key, double lo, double hi);
  std::optional<bool> boolean(const toml::node& n, const std::string& key);
  // `allowed` empty: any string (but not an empty one when `non_empty`).
  std::optional<std::string> string(const toml::node& n, const std::string& key, bool non_empty,
                                    const std::vector<std::string>& allowed = {});
  const toml::table* table(const toml::node& n, const std::string& key);
  const toml::array* array(const toml::node& n, const std::string& key);
  // Records an error for each key of `t` not in `known` (with the closest known one).
  void check_keys(const toml::table& t, const std::string& prefix, const std::vector<std::string>& known);

  // Keys read so far and their nodes, for checks that need several keys (the document must
  // outlive the reader).
  void remember(const std::string& key, const toml::node& n) { seen_[key] = &n; }
  const toml::node* node_of(const std::string& key) const;

  std::string where(const toml::source_region& at) const;
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::string source_;
  std::vector<std::string> errors_;
  std::map<std::string, const toml::node*> seen_;
};

struct key_spec {
  std::string key;
  reload_kind reload = reload_kind::restart;
  // A hot key's pipeline stage, replaced when the key changes ("admission", "cache",
  // "scheduler", "streamer"); empty for keys no stage holds (logging.level).
  std::string stage;
  // For keys holding user-named entries: the entries' keys, relative ("*.tokens_per_s",
  // "[].name"), for documentation checks.
  std::vector<std::string> entries;
  // Diffs list each entry's values ("admission.tenants.alice.tokens_per_s") instead of the
  // whole value.
  bool diff_entries = false;
  std::function<void(troupe_config&, const toml::node&, reader&)> read;
  // Writes the value at `key` into `root`; secrets become "<redacted>" when `redact`.
  std::function<void(const troupe_config&, toml::table& root, bool redact)> write;
};

// Every key, in reference.toml's order.
const std::vector<key_spec>& schema();

// The closest of `candidates` to `word` when it is close enough to be a likely typo, else "".
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

// "a string", "an integer", ...
std::string type_name(const toml::node& n);

// The shortest decimal that reads back as the same double (100 -> "100", 0.9 -> "0.9").
std::string number_text(double v);
// "a, b, c".
std::string join(const std::vector<std::string>& v);

// `s` as a TOML basic string, quoted and escaped.
std::string quote(std::string_view s);

// A value as TOML on one line (tables inline), numbers as short as round-trips allow.
std::string inline_value(const toml::node& n);

// `t` as a TOML document: each table's values, then its sub-tables, then its arrays of tables,
// keys in the table's (sorted) order, no indentation.
std::string write_document(const toml::table& t);

// The table at the dotted path `parent` inside `root`, created when missing ("" : root).
toml::table& table_at(toml::table& root, const std::string& parent);

}  // namespace troupe::config::detail
