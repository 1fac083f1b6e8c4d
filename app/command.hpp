#pragma once
// Subcommands of the `troupe` executable register themselves by name (one file per command),
// so adding a command never touches main.cpp.
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace troupe::app {

// Declares the subcommand's options on `sub` and returns what runs when it is chosen.
using command_setup = std::function<std::function<int()>(CLI::App& sub)>;

struct command_entry {
  std::string name;
  std::string description;
  command_setup setup;
};

std::vector<command_entry>& command_registry();

struct register_command {
  register_command(std::string name, std::string description, command_setup setup) {
    command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace troupe::app
