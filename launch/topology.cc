#include "launch/topology.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace cascade {

int Topology::group_size(int group) const {
  int n = 0;
  for (const RankPlace& p : ranks) n += p.group == group;
  return n;
}

std::string Topology::Describe() const {
  std::map<int, int> per_node;
  for (const RankPlace& p : ranks) ++per_node[p.node];
  std::string nodes_text = absl::StrCat(nodes, nodes == 1 ? " node" : " nodes");
  const int first = per_node.begin()->second;
  bool uniform = true;
  for (const auto& [n, count] : per_node) uniform &= count == first;
  if (uniform) absl::StrAppend(&nodes_text, " x ", first, first == 1 ? " rank" : " ranks");
  const int g0 = group_size(0);
  return absl::StrCat(nodes_text, "; ", groups, groups == 1 ? " stage" : " stages", " of ", g0,
                      g0 == 1 ? " rank" : " ranks", g0 > 1 ? " (tensor parallel)" : "");
}

absl::StatusOr<Topology> MakeTopology(const std::vector<int>& node_key, int tp,
                                      int ranks_per_node) {
  const int n = static_cast<int>(node_key.size());
  if (n == 0) return absl::InvalidArgumentError("topology: no ranks");
  if (tp < 0 || ranks_per_node < 0) {
    return absl::InvalidArgumentError("topology: --tp and --ranks-per-node must not be negative");
  }
  if (ranks_per_node > 0 && n % ranks_per_node != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--ranks-per-node ", ranks_per_node,
                                                   " does not divide the job's ", n, " ranks"));
  }
  Topology t;
  t.ranks.resize(n);
  // Nodes in the order of their lowest rank.
  std::map<int, int> node_of_key;
  std::vector<int> count;
  for (int r = 0; r < n; ++r) {
    const int key = ranks_per_node > 0 ? r / ranks_per_node : node_key[r];
    auto [it, added] = node_of_key.emplace(key, static_cast<int>(count.size()));
    if (added) count.push_back(0);
    t.ranks[r].node = it->second;
    t.ranks[r].node_rank = count[it->second]++;
  }
  t.nodes = static_cast<int>(count.size());
  for (int node = 0; node < t.nodes; ++node) {
    const int g = tp > 0 ? tp : count[node];
    if (count[node] % g != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tp ", g, " does not divide the ", count[node], " ranks of node ", node,
          " (a tensor-parallel group lives inside one node)"));
    }
  }
  // Groups: node by node, consecutive ranks of a node.
  std::map<std::pair<int, int>, int> group_of;  // (node, index in node) -> group
  for (int r = 0; r < n; ++r) {
    RankPlace& p = t.ranks[r];
    const int g = tp > 0 ? tp : count[p.node];
    const std::pair<int, int> key{p.node, p.node_rank / g};
    auto [it, added] = group_of.emplace(key, 0);
    if (added) {
      it->second = t.groups++;
      t.leaders.push_back(r);
    }
    p.group = it->second;
    p.group_rank = p.node_rank % g;
    p.leader = t.leaders[p.group];
  }
  // Number the groups in pipeline order: node, then index in node (ranks of a node need
  // not be consecutive in the world).
  std::vector<std::pair<std::pair<int, int>, int>> order(group_of.begin(), group_of.end());
  std::vector<int> renumber(t.groups);
  std::vector<int> leaders(t.groups);
  for (size_t i = 0; i < order.size(); ++i) {
    renumber[order[i].second] = static_cast<int>(i);
    leaders[i] = t.leaders[order[i].second];
  }
  t.leaders = leaders;
  for (RankPlace& p : t.ranks) p.group = renumber[p.group];
  return t;
}

}  // namespace cascade
