#pragma once
// The vocabularies the tokenizer and detokenizer targets fuzz with: the vocabulary-only GGUFs
// of tests/fixtures/tokenizer, loaded once per process. A target's first input byte picks one,
// so one corpus covers both tokenizer kinds.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.hpp"
#include "model/gguf_reader.hpp"
#include "model/tokenizer.hpp"

namespace troupe::fuzz {

inline const std::vector<model::tokenizer>& vocabularies() {
  static const std::vector<model::tokenizer> v = [] {
    std::vector<model::tokenizer> out;
    for (const char* name : {"smollm2", "llama-spm", "gpt-2"}) {
      const std::string path = std::string(TROUPE_FUZZ_VOCAB_DIR) + "/ggml-vocab-" + name + ".gguf";
      auto f = model::gguf_file::open(path);
      if (!f.ok()) {
        std::fprintf(stderr, "fuzz: cannot read %s: %s\n", path.c_str(), f.error().c_str());
        std::abort();
      }
      auto t = model::tokenizer::from_gguf(*f.value());
      if (!t.ok()) {
        std::fprintf(stderr, "fuzz: %s: %s\n", path.c_str(), t.error().c_str());
        std::abort();
      }
      out.push_back(std::move(t.value()));
    }
    return out;
  }();
  return v;
}

}  // namespace troupe::fuzz

// Loads the vocabularies before the first input (libFuzzer and replay_main.cpp call this once):
// loaded lazily, the load counted against the first input's -timeout, which a loaded machine
// exceeded (2.6 s alone, over 10 s next to builds: reported as a timeout on a 1-byte input).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  troupe::fuzz::vocabularies();
  return 0;
}
