// Subcommands of the `cascade` command-line tool. Each Add* function registers one
// subcommand (its flags and its action) on the CLI11 app; actions return the process exit
// code and report errors on stderr as "cascade <cmd>: <message>".
#ifndef CASCADE_TOOLS_COMMANDS_H_
#define CASCADE_TOOLS_COMMANDS_H_

#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cascade/v1/inference.pb.h"

namespace cascade::cli {

// `cascade serve`'s addresses, and so the clients' defaults: the public API (Inference,
// health; what `generate --server` takes) and the control plane (workers, and what
// `status --control` takes). Two services on two ports: each client names its own.
constexpr char kDefaultPublicAddress[] = "127.0.0.1:50051";
constexpr char kDefaultControlAddress[] = "127.0.0.1:50053";

// The action a subcommand runs after parsing; its return value is the exit code.
using Action = std::function<int()>;

void AddGenerate(CLI::App& app, Action* action);
void AddTokenize(CLI::App& app, Action* action);
void AddDetokenize(CLI::App& app, Action* action);
void AddLogits(CLI::App& app, Action* action);
void AddInspect(CLI::App& app, Action* action);
void AddServe(CLI::App& app, Action* action);
void AddStatus(CLI::App& app, Action* action);
void AddPlan(CLI::App& app, Action* action);
void AddMakeModel(CLI::App& app, Action* action);
void AddQuantize(CLI::App& app, Action* action);

// `generate --server`: streams a completion from a running cluster.
int RunRemoteGenerate(const std::string& server, const v1::GenerateRequest& req, bool ids,
                      bool echo);

}  // namespace cascade::cli

#endif  // CASCADE_TOOLS_COMMANDS_H_
