// The `cascade` command-line tool: generate, tokenize, detokenize, logits, inspect, and
// (with the cluster) serve, plan, status.
#include <cstdlib>
#include <iostream>

#include "tools/commands.h"
#include "transport/grpc_util.h"
#include "util/logging.h"
#include "util/runtime.h"

int main(int argc, char** argv) {
  cascade::ConfigureRuntime();
  CLI::App app{"Cascade: serve large language models from a cluster", "cascade"};
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may follow the subcommand
  // --help shows each option's default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(40);
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error, off (default: info for serve, whose request "
                 "and throughput lines are at info; warn otherwise)");
  cascade::cli::Action action;
  cascade::cli::AddGenerate(app, &action);
  cascade::cli::AddTokenize(app, &action);
  cascade::cli::AddDetokenize(app, &action);
  cascade::cli::AddLogits(app, &action);
  cascade::cli::AddInspect(app, &action);
  cascade::cli::AddServe(app, &action);
  cascade::cli::AddStatus(app, &action);
  cascade::cli::AddPlan(app, &action);
  cascade::cli::AddMakeModel(app, &action);
  cascade::cli::AddQuantize(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (log_level.empty()) log_level = app.got_subcommand("serve") ? "info" : "warn";
  if (absl::Status st = cascade::InitLogging(log_level); !st.ok()) {
    std::cerr << "cascade: " << st.message() << "\n";
    return 2;
  }
  cascade::RouteGrpcLogsToSpdlog();
  return action ? action() : 0;
}
