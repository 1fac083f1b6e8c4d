#include "actors/executor/executor.hpp"

#include <caf/all.hpp>

#include "actors/detail/caf_util.hpp"
#include "actors/executor/executor_state.hpp"

namespace troupe::actors {

namespace {

struct executor_actor_state {
  std::unique_ptr<executor_state> exec;
  std::string init_error;
  static inline const char* name = "troupe.executor";
};

executor_actor::behavior_type executor_fn(executor_actor::stateful_pointer<executor_actor_state> self,
                                          backend_maker make, std::shared_ptr<const text_codec> codec) {
  try {
    auto be = make();
    if (be)
      self->state.exec = std::make_unique<executor_state>(std::move(be.value()), std::move(codec));
    else
      self->state.init_error = "the backend could not be built: " + be.error();
  } catch (const std::exception& e) {
    self->state.init_error = std::string("the backend could not be built: ") + e.what();
  }
  auto unusable = [self] {
    auto err = caf::make_error(caf::sec::runtime_error, self->state.init_error);
    self->quit(err);
    return err;
  };
  return {
      [=](step_atom, const step_plan& plan) -> caf::result<step_result> {
        if (!self->state.exec) return unusable();
        try {
          return self->state.exec->run(plan);
        } catch (const std::exception& e) {
          // The backend's memory may be inconsistent now: answer, then make way for a new one.
          auto err = caf::make_error(caf::sec::runtime_error, std::string("executor fault: ") + e.what());
          self->quit(err);
          return err;
        } catch (...) {
          auto err = caf::make_error(caf::sec::runtime_error, std::string("executor fault: unknown exception"));
          self->quit(err);
          return err;
        }
      },
      [=](info_atom) -> caf::result<executor_info> {
        if (!self->state.exec) return unusable();
        return self->state.exec->info();
      },
  };
}

}  // namespace

executor_actor spawn_executor(caf::actor_system& sys, backend_maker make, std::shared_ptr<const text_codec> codec) {
  return sys.spawn<caf::detached>(executor_fn, std::move(make), std::move(codec));
}

}  // namespace troupe::actors
