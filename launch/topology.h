// Topology: where each rank of a cascade-mpi job sits. Ranks are grouped into nodes (by
// the machine they share, or --ranks-per-node to make one machine pretend to be several),
// each node's ranks into tensor-parallel groups of `tp` consecutive ranks (one pipeline
// stage each), and the stages form the pipeline in node order, then group order: the
// only hops between nodes are between consecutive stages.
//
// Contract: a pure function of its arguments; thread-safe. Refused, with the reason
// named: a group size that does not divide some node's rank count, --ranks-per-node that
// does not divide the world, non-positive sizes.
#ifndef CASCADE_LAUNCH_TOPOLOGY_H_
#define CASCADE_LAUNCH_TOPOLOGY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade {

struct RankPlace {
  int node = 0;        // node index (nodes numbered by their lowest rank)
  int node_rank = 0;   // index among its node's ranks
  int group = 0;       // its tensor-parallel group = its pipeline stage
  int group_rank = 0;  // 0: the group's leader
  int leader = 0;      // world rank of the group's leader
};

struct Topology {
  int nodes = 0;
  int groups = 0;
  std::vector<RankPlace> ranks;  // by world rank
  std::vector<int> leaders;      // world rank of each group's leader, by group
  int group_size(int group) const;
  std::string Describe() const;  // "2 nodes x 2 ranks; 2 stages of 2 ranks (tensor parallel)"
};

// `node_key[r]`: any value equal for the ranks of one machine (e.g. the lowest world rank
// on it). ranks_per_node > 0 overrides it: ranks [0, k) are node 0, [k, 2k) node 1, ...
// tp = 0: one group per node (all its ranks).
absl::StatusOr<Topology> MakeTopology(const std::vector<int>& node_key, int tp, int ranks_per_node);

}  // namespace cascade

#endif  // CASCADE_LAUNCH_TOPOLOGY_H_
