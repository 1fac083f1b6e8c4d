#pragma once
// Tool (function) calls as chat models write them: the tools offered in the prompt, earlier calls
// and their results rendered back into the conversation, the grammar a forced call is constrained
// to, and a parser that reads calls out of the generated text as it streams.
//
// Formats, chosen from the chat template's family:
//   hermes   ChatML models (Qwen2/2.5, Hermes, SmolLM2): the tools as JSON in <tools></tools> in the
//            system turn; a call is <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>;
//            a result is a user turn holding <tool_response>\n...\n</tool_response>.
//   llama3   Llama 3.1+: a call is the JSON object {"name": ..., "parameters": {...}}; results
//            come back in an `ipython` turn.
//   mistral  [TOOL_CALLS] [{"name": ..., "arguments": {...}}]; results in [TOOL_RESULTS].
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.hpp"

namespace troupe::structured {

enum class tool_format { hermes, llama3, mistral };
const char* to_string(tool_format f);
// The markers a call of this format is written between (hermes: <tool_call> and </tool_call>);
// empty for formats whose calls have none around each (llama3, mistral's one list).
std::pair<std::string_view, std::string_view> call_markers(tool_format f);

struct tool_def {
  std::string name;
  std::string description;
  std::string parameters;  // JSON Schema text; "" when the function takes no arguments
  bool strict = false;     // its arguments are constrained under tool_choice "auto" too
};

struct function_call {
  std::string name;
  std::string arguments;  // JSON text of an object
};

// The text offering `tools`, for the system turn (appended after any system text of the caller).
std::string tools_prompt(tool_format f, const std::vector<tool_def>& tools);
// An assistant turn that made `calls`, as the model itself would have written it.
std::string calls_text(tool_format f, const std::vector<function_call>& calls);
// A tool's result as the conversation carries it, and the role of the turn that holds it.
std::string tool_result_text(tool_format f, std::string_view content);
const char* tool_result_role(tool_format f);

// GBNF for the reply of a forced call: one call (several with `many`) of `only` (or of any of
// `tools` when `only` is empty), the arguments constrained to the function's parameter schema.
// Errors name the function whose schema is outside the supported subset.
result<std::string> calls_grammar(tool_format f, const std::vector<tool_def>& tools, std::string_view only,
                                  bool many = false, std::string_view root = "root");

// GBNF for a reply under tool_choice "auto" that offers a `strict` function (OpenAI: its arguments
// always follow its schema): any text without the call marker, then optionally calls, the strict
// functions' arguments constrained to their schemas and the others' to any JSON object. Only
// formats whose calls open with a marker the text can be told from (hermes) can be read this way.
// `many` false: at most one call (OpenAI's `parallel_tool_calls: false`), then the reply ends.
bool auto_calls_constrainable(tool_format f);
result<std::string> auto_calls_grammar(tool_format f, const std::vector<tool_def>& tools, bool many = true);

// Reads calls out of generated text as it arrives. Text outside calls is content; a call's name
// is reported as soon as it is known and its arguments as they arrive (the JSON text of the
// arguments object, in pieces), as OpenAI streams `tool_calls` deltas.
class tool_call_parser {
 public:
  // `forced`: the reply is constrained to calls (tool_choice "required", or "function" naming
  // `forced_name`), so nothing in it is content: a reply cut short (max_tokens) before a call's
  // name was complete gives no content (the markup written so far is dropped) and, when the
  // function is known from tool_choice, a call of it with arguments "" (the name comes first).
  // `known_names`: the offered tools' names. When not empty, a call naming anything else is not a
  // call (the model made the name up, or took the user's text for one): its markup, as written,
  // is content, and it takes no call number. Empty: any name is accepted. A forced reply ignores
  // it (its grammar admits only the offered names, and nothing in it may be content).
  explicit tool_call_parser(tool_format f, bool forced = false, std::string forced_name = {},
                            std::vector<std::string> known_names = {});

  struct delta {
    std::string content;          // plain text (not part of a call)
    int32_t call = -1;            // >= 0: this delta belongs to call number `call`
    std::string name;             // set once, in the call's first delta
    std::string arguments;        // the next piece of its arguments' JSON text
  };
  // Feeds the next piece of generated text; returns what became certain.
  std::vector<delta> push(std::string_view text);
  // The end of the output: what was held back (an unfinished call is returned as content).
  std::vector<delta> finish();

  const std::vector<function_call>& calls() const { return calls_; }  // complete ones so far
  bool forced() const { return forced_; }  // the reply is calls only (no content)

 private:
  std::vector<delta> scan(bool at_end);
  void cut_short(std::vector<delta>& out);
  bool offered(const std::string& name) const;

  tool_format f_;
  std::string buf_;        // text not yet released
  bool in_call_ = false;   // inside a call's opening marker .. closing marker
  bool named_ = false;     // the current call's name was reported
  std::string cur_name_;   // that name
  size_t args_from_ = 0;   // where the arguments' JSON starts in buf_ (0: not found yet)
  size_t args_sent_ = 0;   // bytes of the arguments already reported
  bool args_done_ = false;
  // The arguments' JSON value, scanned as it arrives: nesting depth, inside a string, after a
  // backslash; scan_ is the offset in buf_ scanned so far.
  int32_t depth_ = 0;
  bool in_str_ = false, esc_ = false, started_ = false;
  size_t scan_ = 0;
  bool whole_ = false;     // llama3 / mistral: the call is the whole reply; read at the end
  bool forced_ = false;
  std::string forced_name_;
  std::vector<std::string> known_names_;
  // hermes: the current call names a function not offered; it becomes content at its closing
  // marker (or the end), with gap_, the whitespace before it that a call would have swallowed.
  bool unknown_ = false;
  std::string gap_;
  std::vector<function_call> calls_;
};

}  // namespace troupe::structured
