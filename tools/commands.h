// Subcommands of the `cascade` command-line tool. Each Add* function registers one
// subcommand (its flags and its action) on the CLI11 app; actions return the process exit
// code and report errors on stderr as "cascade <cmd>: <message>".
#ifndef CASCADE_TOOLS_COMMANDS_H_
#define CASCADE_TOOLS_COMMANDS_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace cascade::cli {

// The action a subcommand runs after parsing; its return value is the exit code.
using Action = std::function<int()>;

void AddGenerate(CLI::App& app, Action* action);
void AddTokenize(CLI::App& app, Action* action);
void AddDetokenize(CLI::App& app, Action* action);
void AddLogits(CLI::App& app, Action* action);
void AddInspect(CLI::App& app, Action* action);

}  // namespace cascade::cli

#endif  // CASCADE_TOOLS_COMMANDS_H_
