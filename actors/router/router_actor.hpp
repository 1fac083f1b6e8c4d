#pragma once
// Spawning the router (its interface and messages: router.hpp).
#include <cstdint>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/router/router.hpp"

namespace troupe::actors {

struct router_options {
  router_config config;
  std::string model;       // what joining workers must serve (name and vocabulary)
  int32_t n_vocab = 0;
  int32_t block_size = 16; // the local replica's KV block size (prefix estimates)
};

// The routing policy must exist in routing_policy_registry() (the pipeline checks it first).
router_actor spawn_router(caf::actor_system& sys, router_options opts);

}  // namespace troupe::actors
