// Coordinator configuration from flags and from a YAML cluster file.
//
// Contract: LoadClusterConfig reads a YAML mapping whose keys are the flag names with
// underscores (model, listen, workers, min_stages, kv_sequences, max_batch_tokens, ...);
// an unknown key or a value of the wrong type is an error naming the file and key.
// Flags given on the command line override the file (the file is read first).
#ifndef CASCADE_COORDINATOR_CLUSTER_CONFIG_H_
#define CASCADE_COORDINATOR_CLUSTER_CONFIG_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "coordinator/coordinator_server.h"

namespace cascade {

// Registers the coordinator's flags, bound to *o.
void AddCoordinatorFlags(CLI::App& app, CoordinatorOptions* o);
absl::Status LoadClusterConfig(const std::string& path, CoordinatorOptions* o);
// Finds "--config PATH" (or --config=PATH) in argv; "" if absent.
std::string FindConfigFlag(int argc, char** argv);

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_CLUSTER_CONFIG_H_
