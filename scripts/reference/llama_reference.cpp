// Troupe's llama.cpp reference tool. Compiled and run by scripts/make-llama-reference.sh against
// the llama.cpp built by scripts/build-llama-cpp.sh; it is not part of Troupe's CMake build.
//
//   llama_reference greedy MODEL PROMPTS OUT_TXT [N_STEPS] [N_THREADS]
//       PROMPTS: one prompt a line, "NAME PARSE_SPECIAL HEX_UTF8_TEXT".
//       For each prompt: tokenize (BOS only if the model asks for it), evaluate the prompt in one
//       batch, then greedy-decode N_STEPS tokens one at a time (single sequence), recording the
//       chosen id and the top-5 (id, raw logit) of the logits that chose it. Stops a prompt early
//       at an end-of-generation token (recorded). Writes the text format described in
//       tests/fixtures/llama_reference/README.md (lines "prompt", "text", "step", "output").
//       Variants for measuring llama.cpp's own noise floor (the committed fixture uses none):
//         TROUPE_REF_KV=f16        KV cache in f16 instead of f32
//         TROUPE_REF_FLASH_ATTN=1  flash attention on
//         TROUPE_REF_PROMPT_ONE=1  feed the prompt one token per llama_decode instead of one batch
//   llama_reference tokenize-fixture VOCAB_GGUF INP OUT
//       Tokenizes every text of INP (separated by "\n__ggml_vocab_test__\n", as llama.cpp's
//       test-tokenizer-0 reads them) with no BOS/EOS added and special tokens not parsed; writes
//       one line per text to OUT: " id id id" (each id preceded by a space), empty for no tokens.
//   llama_reference vocab-gguf MODEL_GGUF OUT_GGUF
//       Writes a vocabulary-only GGUF (no tensors): general.architecture, general.name, the
//       architecture's hyper-parameters (ARCH.*) and every tokenizer.* key of MODEL_GGUF.
//   llama_reference info
//       Prints llama.cpp's system info line.
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

[[noreturn]] void die(const std::string & msg) {
    fprintf(stderr, "llama_reference: %s\n", msg.c_str());
    exit(1);
}

std::string hex_encode(const std::string & s) {
    static const char * d = "0123456789abcdef";
    std::string out;
    out.reserve(s.size() * 2);
    for (unsigned char c : s) {
        out.push_back(d[c >> 4]);
        out.push_back(d[c & 15]);
    }
    return out;
}

std::string hex_decode(const std::string & h) {
    if (h.size() % 2) die("odd-length hex string");
    auto nib = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        die(std::string("bad hex digit ") + c);
    };
    std::string out;
    for (size_t i = 0; i < h.size(); i += 2) out.push_back(char(nib(h[i]) * 16 + nib(h[i + 1])));
    return out;
}

std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & text, bool add_special,
                                  bool parse_special) {
    int n = -llama_tokenize(vocab, text.data(), int32_t(text.size()), nullptr, 0, add_special, parse_special);
    if (n < 0) n = 0;  // a non-negative return for 0 capacity means 0 tokens
    std::vector<llama_token> toks(n);
    if (n > 0) {
        int got = llama_tokenize(vocab, text.data(), int32_t(text.size()), toks.data(), n, add_special, parse_special);
        if (got != n) die("tokenize: size mismatch");
    }
    return toks;
}

std::string detokenize(const llama_vocab * vocab, const std::vector<llama_token> & toks) {
    std::string out(toks.size() * 16 + 16, '\0');
    int n = llama_detokenize(vocab, toks.data(), int32_t(toks.size()), out.data(), int32_t(out.size()),
                             /*remove_special=*/false, /*unparse_special=*/true);
    if (n < 0) {
        out.resize(size_t(-n));
        n = llama_detokenize(vocab, toks.data(), int32_t(toks.size()), out.data(), int32_t(out.size()), false, true);
    }
    out.resize(size_t(n));
    return out;
}

llama_model * load_model(const std::string & path, bool vocab_only) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = vocab_only;
    mp.progress_callback = [](float, void *) { return true; };  // no progress dots
    llama_model * model = llama_model_load_from_file(path.c_str(), mp);
    if (!model) die("could not load " + path);
    return model;
}

int cmd_greedy(int argc, char ** argv) {
    if (argc < 5) die("usage: greedy MODEL PROMPTS OUT_TXT [N_STEPS] [N_THREADS]");
    const std::string model_path = argv[2], prompts_path = argv[3], out_path = argv[4];
    const int n_steps = argc > 5 ? atoi(argv[5]) : 32;
    const int n_threads = argc > 6 ? atoi(argv[6]) : 2;

    struct Prompt { std::string name; bool parse_special; std::string text; };
    std::vector<Prompt> prompts;
    {
        std::ifstream in(prompts_path);
        if (!in) die("cannot open " + prompts_path);
        std::string line;
        while (std::getline(in, line)) {
            if (line.empty()) continue;
            std::istringstream ls(line);
            Prompt p;
            int ps = 0;
            std::string hex;
            if (!(ls >> p.name >> ps >> hex)) die("bad prompt line: " + line);
            p.parse_special = ps != 0;
            p.text = hex_decode(hex);
            prompts.push_back(p);
        }
    }

    llama_model * model = load_model(model_path, false);
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const bool add_bos = llama_vocab_get_add_bos(vocab);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 1024;
    cp.n_ubatch = 1024;
    cp.n_seq_max = 1;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    const char * env_kv = getenv("TROUPE_REF_KV");
    const char * env_fa = getenv("TROUPE_REF_FLASH_ATTN");
    const char * env_one = getenv("TROUPE_REF_PROMPT_ONE");
    const bool kv_f16 = env_kv && std::string(env_kv) == "f16";
    const bool flash_attn = env_fa && atoi(env_fa) != 0;
    const bool prompt_one = env_one && atoi(env_one) != 0;
    cp.flash_attn_type = flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.type_v = kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.no_perf = true;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) die("could not create context");

    FILE * out = fopen(out_path.c_str(), "w");
    if (!out) die("cannot write " + out_path);
    fprintf(out, "# troupe llama.cpp greedy reference, text format v1\n");
    fprintf(out, "meta n_prompts %zu\n", prompts.size());
    fprintf(out, "meta n_steps %d\n", n_steps);
    fprintf(out, "meta n_threads %d\n", n_threads);
    fprintf(out, "meta add_bos %d\n", add_bos ? 1 : 0);
    fprintf(out, "meta n_vocab %d\n", n_vocab);
    fprintf(out, "meta kv_type %s\n", kv_f16 ? "f16" : "f32");
    fprintf(out, "meta flash_attn %d\n", flash_attn ? 1 : 0);
    if (prompt_one) fprintf(out, "meta prompt_batch 1\n");

    for (size_t pi = 0; pi < prompts.size(); ++pi) {
        const Prompt & p = prompts[pi];
        std::vector<llama_token> toks = tokenize(vocab, p.text, add_bos, p.parse_special);
        if (toks.empty()) die("prompt " + p.name + " has no tokens");
        if (int(toks.size()) + n_steps > int(cp.n_ctx)) die("prompt " + p.name + " too long");

        fprintf(out, "prompt %zu %s %d %zu", pi, p.name.c_str(), p.parse_special ? 1 : 0, toks.size());
        for (llama_token t : toks) fprintf(out, " %d", t);
        fprintf(out, "\ntext %zu %s\n", pi, hex_encode(p.text).c_str());

        llama_memory_clear(llama_get_memory(ctx), true);
        if (prompt_one) {
            for (llama_token & t : toks)
                if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) die("decode failed on prompt " + p.name);
        } else if (llama_decode(ctx, llama_batch_get_one(toks.data(), int32_t(toks.size()))) != 0) {
            die("decode failed on prompt " + p.name);
        }

        std::vector<llama_token> gen;
        std::vector<int> idx(n_vocab);
        bool eog = false;
        for (int step = 0; step < n_steps; ++step) {
            const float * logits = llama_get_logits_ith(ctx, -1);
            for (int i = 0; i < n_vocab; ++i) idx[i] = i;
            // top-5 by logit, ties broken by the smaller id (so the argmax is deterministic)
            std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(), [&](int a, int b) {
                return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
            });
            const llama_token tok = idx[0];
            fprintf(out, "step %zu %d %d", pi, step, tok);
            for (int k = 0; k < 5; ++k) fprintf(out, " %d %.9g", idx[k], logits[idx[k]]);
            fprintf(out, "\n");
            gen.push_back(tok);
            if (llama_vocab_is_eog(vocab, tok)) { eog = true; break; }
            if (step + 1 < n_steps) {
                llama_token t = tok;
                if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) die("decode failed on prompt " + p.name);
            }
        }
        fprintf(out, "output %zu %zu %d %s\n", pi, gen.size(), eog ? 1 : 0, hex_encode(detokenize(vocab, gen)).c_str());
        fflush(out);
        fprintf(stderr, "llama_reference: prompt %2zu %-18s %4zu prompt tokens, %2zu generated%s\n", pi,
                p.name.c_str(), toks.size(), gen.size(), eog ? " (stopped at end-of-generation)" : "");
    }
    fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

int cmd_tokenize_fixture(int argc, char ** argv) {
    if (argc < 5) die("usage: tokenize-fixture VOCAB_GGUF INP OUT");
    llama_model * model = load_model(argv[2], true);
    const llama_vocab * vocab = llama_model_get_vocab(model);

    std::ifstream in(argv[3], std::ios::binary);
    if (!in) die(std::string("cannot open ") + argv[3]);
    std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // same splitting as llama.cpp's tests/test-tokenizer-0.cpp
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    while (pos < raw.size()) {
        size_t next = raw.find(sep, pos);
        if (next == std::string::npos) { texts.push_back(raw.substr(pos)); break; }
        texts.push_back(raw.substr(pos, next - pos));
        pos = next + sep.size();
    }
    FILE * out = fopen(argv[4], "w");
    if (!out) die(std::string("cannot write ") + argv[4]);
    for (const std::string & t : texts) {
        for (llama_token id : tokenize(vocab, t, /*add_special=*/false, /*parse_special=*/false)) fprintf(out, " %d", id);
        fprintf(out, "\n");
    }
    fclose(out);
    fprintf(stderr, "llama_reference: %zu texts tokenized into %s\n", texts.size(), argv[4]);
    llama_model_free(model);
    return 0;
}

int cmd_vocab_gguf(int argc, char ** argv) {
    if (argc < 4) die("usage: vocab-gguf MODEL_GGUF OUT_GGUF");
    gguf_init_params ip = {/*no_alloc=*/true, /*ctx=*/nullptr};
    gguf_context * src = gguf_init_from_file(argv[2], ip);
    if (!src) die(std::string("cannot read ") + argv[2]);
    const int64_t arch_id = gguf_find_key(src, "general.architecture");
    if (arch_id < 0) die("no general.architecture");
    const std::string arch = gguf_get_val_str(src, arch_id);

    gguf_context * dst = gguf_init_empty();
    gguf_set_kv(dst, src);  // copy every key/value, then drop what a vocabulary file does not need
    std::vector<std::string> drop;
    for (int64_t i = 0; i < gguf_get_n_kv(dst); ++i) {
        const std::string k = gguf_get_key(dst, i);
        const bool keep = k == "general.architecture" || k == "general.name" || k.rfind("tokenizer.", 0) == 0 ||
                          k.rfind(arch + ".", 0) == 0;
        if (!keep) drop.push_back(k);
    }
    for (const std::string & k : drop) gguf_remove_key(dst, k.c_str());
    if (!gguf_write_to_file(dst, argv[3], /*only_meta=*/false)) die(std::string("cannot write ") + argv[3]);
    fprintf(stderr, "llama_reference: wrote %s: %" PRId64 " keys, 0 tensors (dropped %zu keys)\n", argv[3],
            gguf_get_n_kv(dst), drop.size());
    gguf_free(dst);
    gguf_free(src);
    return 0;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) die("usage: llama_reference greedy|tokenize-fixture|vocab-gguf|info ...");
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    const std::string cmd = argv[1];
    int rc;
    if (cmd == "greedy") rc = cmd_greedy(argc, argv);
    else if (cmd == "tokenize-fixture") rc = cmd_tokenize_fixture(argc, argv);
    else if (cmd == "vocab-gguf") rc = cmd_vocab_gguf(argc, argv);
    else if (cmd == "info") { printf("%s\n", llama_print_system_info()); rc = 0; }
    else die("unknown command " + cmd);
    llama_backend_free();
    return rc;
}
