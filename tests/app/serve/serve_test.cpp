// `troupe serve` while its model loads (app/serve/serve.cpp): a model path that is a named pipe
// is refused at once by name instead of blocking the loader, and SIGTERM while a load is stuck
// ends the process instead of waiting for the loader forever.
#include "app/serve/serve.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/support/temp_dir.hpp"

using namespace troupe;

namespace {

app::serve_options loopback_options(const std::string& model_path) {
  app::serve_options o;
  o.config.model.path = model_path;
  o.config.server.host = "127.0.0.1";
  o.config.server.port = 0;
  o.config.server.io_threads = 1;
  o.quiet = true;
  return o;
}

}  // namespace

TEST(Serve, NamedPipeAsTheModelIsALoadErrorNotAHang) {
  test::temp_dir dir("serve-fifo");
  const std::string fifo = dir.str("model.gguf");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto s = app::serve_instance::start(loopback_options(fifo));
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_FALSE(s.value()->wait_ready(std::chrono::seconds(10)));
  if (!s.value()->load_finished()) {
    // A writer releases an open that waits for one; without it stop() would join the loader forever.
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
    FAIL() << "the loader still blocks on the named pipe";
  }
  EXPECT_NE(s.value()->load_error().find(fifo), std::string::npos) << s.value()->load_error();
  EXPECT_NE(s.value()->load_error().find("named pipe"), std::string::npos) << s.value()->load_error();
}

TEST(ServeDeathTest, SigtermWhileTheModelLoadsStopsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto o = loopback_options("stuck.gguf");
        // The loader thread inherits run_serve's signal mask, so the signal waits for run_serve's
        // sigtimedwait; then the load never ends, as one stuck on a dead mount would not.
        o.load_model = [](const std::string&) -> result<std::shared_ptr<model::llama_model>> {
          ::kill(::getpid(), SIGTERM);
          for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
        };
        ::alarm(30);  // a run_serve that waits for the loader dies of SIGALRM: a failure, not a hang
        std::exit(app::run_serve(o) == 0 ? 3 : 4);  // it must end the process itself
      },
      ::testing::ExitedWithCode(0), "stopped while the model was loading");
}
