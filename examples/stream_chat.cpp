// Shows: the in-process client (actors/client.hpp) streaming a chat answer token by token
// through the actor pipeline, then cancelling a second request mid-stream.
//   example_stream_chat [model.gguf] ["question"]
#include <chrono>
#include <cstdio>
#include <string>

#include "actors/client.hpp"
#include "actors/supervisor/pipeline.hpp"
#include "actors/runtime.hpp"
#include "model/llama_model.hpp"

using namespace troupe::actors;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const std::string question = argc > 2 ? argv[2] : "What is the capital of France?";
  auto m = troupe::model::llama_model::load(path);
  if (!m) {
    std::fprintf(stderr, "%s\n(fetch the model with scripts/fetch-model.sh, or pass a GGUF file)\n", m.error().c_str());
    return 0;
  }
  runtime rt;
  auto p = pipeline::start(rt.system(), pipeline_config{}, m.value(), troupe::model::backend_options{});
  if (!p) {
    std::fprintf(stderr, "%s\n", p.error().c_str());
    return 1;
  }
  client c(**p);

  request_spec ask;
  ask.messages = {{"user", question}};
  ask.max_tokens = 64;
  auto s = c.submit(ask);
  while (auto e = s->next(60s)) {
    if (auto* t = std::get_if<token_event>(&*e)) {
      std::printf("%s", t->text.c_str());
      std::fflush(stdout);
    } else if (auto* d = std::get_if<done_event>(&*e)) {
      std::printf("%s\n[%s: %d prompt + %d completion tokens, first token after %.0f ms]\n", d->text.c_str(),
                  d->finish_reason.c_str(), d->usage.prompt_tokens, d->usage.completion_tokens, d->timings.ttft_ms);
      break;
    } else {
      const auto& err = std::get<error_event>(*e);
      std::printf("\nerror %s: %s\n", err.code.c_str(), err.message.c_str());
      break;
    }
  }

  // Cancelling: the stream ends with finish_reason "cancelled" and its KV blocks are freed.
  ask.messages = {{"user", "Count from one to one hundred."}};
  ask.max_tokens = 200;
  auto second = c.submit(ask);
  for (int i = 0; i < 5; ++i) second->next(60s);
  second->cancel();
  auto rest = second->wait(60s);
  std::printf("second request: %s after %d tokens\n", rest.finish_reason.c_str(), rest.usage.completion_tokens);
  return 0;
}
