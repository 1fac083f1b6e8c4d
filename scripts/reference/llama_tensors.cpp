// Dumps llama.cpp's named intermediate tensors for one prompt, to find where Troupe's arithmetic
// departs from ggml's (compare with Troupe's ops applied to the same inputs). A debugging tool,
// not part of any build; compile it like scripts/make-llama-reference.sh compiles
// llama_reference.cpp:
//   g++ -std=c++17 -O2 -o /tmp/llama_tensors scripts/reference/llama_tensors.cpp
//     -I .cache/llama.cpp/src/include -I .cache/llama.cpp/src/ggml/include
//     -L .cache/llama.cpp/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$PWD/.cache/llama.cpp/build/bin
//   (one command line)
//
//   llama_tensors MODEL OUT_DIR N_THREADS ID [ID ...]
//       Evaluates the token ids in one batch (KV f32, flash attention off, as the committed
//       reference) and writes every f32 tensor the graph computes to OUT_DIR/NAME.bin. With
//       TROUPE_DUMP_DECODE=1 all ids but the last are evaluated first (not dumped) and the dump is
//       of the last id decoded alone, as a greedy step is (llama.cpp's kernels differ for one token). A name the
//       graph uses more than once (Qcur-0 before and after RoPE) gets ".1", ".2" ... appended in
//       evaluation order. File format: int32 ne[4], then ne0*ne1*ne2*ne3 floats (row-major, ne0
//       fastest). OUT_DIR/index.txt lists "NAME OP ne0 ne1 ne2 ne3".
#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

struct dump_state {
  std::string dir;
  std::map<std::string, int> seen;
  FILE* index = nullptr;
  bool on = true;
};

bool eval_cb(ggml_tensor* t, bool ask, void* user) {
  auto* st = static_cast<dump_state*>(user);
  if (ask) return st->on && t->type == GGML_TYPE_F32;  // only f32 results are compared
  if (!st->on) return true;
  std::string name = t->name;
  if (name.empty()) return true;
  const int n = st->seen[name]++;
  if (n > 0) name += "." + std::to_string(n);
  std::vector<float> buf(static_cast<size_t>(ggml_nelements(t)));
  if (ggml_is_contiguous(t)) {
    ggml_backend_tensor_get(t, buf.data(), 0, ggml_nbytes(t));
  } else {  // views (permuted Q/K/V): gather element by element
    std::vector<char> raw(ggml_nbytes(t));
    ggml_backend_tensor_get(t, raw.data(), 0, raw.size());
    size_t k = 0;
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
          for (int64_t i0 = 0; i0 < t->ne[0]; ++i0)
            buf[k++] = *reinterpret_cast<const float*>(raw.data() + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] +
                                                       i3 * t->nb[3]);
  }
  const std::string path = st->dir + "/" + name + ".bin";
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) return false;
  const int32_t ne[4] = {int32_t(t->ne[0]), int32_t(t->ne[1]), int32_t(t->ne[2]), int32_t(t->ne[3])};
  fwrite(ne, sizeof ne, 1, f);
  fwrite(buf.data(), sizeof(float), buf.size(), f);
  fclose(f);
  fprintf(st->index, "%s %s %d %d %d %d\n", name.c_str(), ggml_op_desc(t), ne[0], ne[1], ne[2], ne[3]);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: llama_tensors MODEL OUT_DIR N_THREADS ID [ID ...]\n");
    return 1;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  std::vector<llama_token> toks;
  for (int i = 4; i < argc; ++i) toks.push_back(atoi(argv[i]));

  dump_state st;
  st.dir = argv[2];
  st.index = fopen((st.dir + "/index.txt").c_str(), "w");
  if (!st.index) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 1024;
  cp.n_batch = 1024;
  cp.n_ubatch = 1024;
  cp.n_seq_max = 1;
  cp.n_threads = cp.n_threads_batch = atoi(argv[3]);
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.cb_eval = eval_cb;
  cp.cb_eval_user_data = &st;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const char* env = getenv("TROUPE_DUMP_DECODE");
  if (env && atoi(env) != 0 && toks.size() > 1) {
    st.on = false;
    if (llama_decode(ctx, llama_batch_get_one(toks.data(), int32_t(toks.size() - 1))) != 0) return 1;
    st.on = true;
    if (llama_decode(ctx, llama_batch_get_one(&toks.back(), 1)) != 0) return 1;
  } else if (llama_decode(ctx, llama_batch_get_one(toks.data(), int32_t(toks.size()))) != 0) {
    return 1;
  }
  fclose(st.index);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
