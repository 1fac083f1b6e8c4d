// `troupe tokenize`: the token ids a model's vocabulary gives a text, space-separated on one
// line. No BOS/EOS is added and special tokens are plain text unless --special, so the output
// compares directly with llama.cpp's tokenizer test vectors. Needs only the vocabulary: a
// vocabulary-only GGUF file works.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "app/command.hpp"
#include "app/file_text.hpp"
#include "model/gguf_reader.hpp"
#include "model/tokenizer.hpp"

namespace {

struct tokenize_options {
  std::string model;
  std::string file;
  std::string text;
  bool special = false;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "troupe tokenize: %s\n", message.c_str());
  return 1;
}

int run_tokenize(const tokenize_options& o, bool from_file) {
  std::string text = o.text;
  if (from_file) {
    auto read = troupe::app::read_file_text(o.file);
    if (!read) return fail(read.error());
    text = std::move(read.value());
  }
  auto file = troupe::model::gguf_file::open(o.model);
  if (!file) return fail(file.error());
  auto tok = troupe::model::tokenizer::from_gguf(*file.value());
  if (!tok) return fail(o.model + ": " + tok.error());
  auto ids = tok->encode_checked(text, /*add_bos=*/false, /*parse_special=*/o.special);
  if (!ids) return fail((from_file ? o.file : std::string("the text")) + ": " + ids.error());

  std::string line;
  line.reserve(ids->size() * 6 + 1);
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids.value()[i]);
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

troupe::app::register_command reg(
    "tokenize", "Print the token ids of a text (no BOS/EOS; --special parses special tokens)",
    [](CLI::App& sub) {
      auto o = std::make_shared<tokenize_options>();
      sub.add_option("--model,-m", o->model, "GGUF file (a vocabulary-only file is enough)")
          ->required();
      sub.add_flag("--special", o->special, "Parse special tokens such as <|im_start|> in the text");
      auto* file = sub.add_option("--file,-f", o->file,
                                  "Read the text from this file, byte for byte (trailing newlines "
                                  "included)");
      sub.add_option("text", o->text, "Text to tokenize (default: the empty text)")->excludes(file);
      return [o, file]() { return run_tokenize(*o, file->count() > 0); };
    });

}  // namespace
