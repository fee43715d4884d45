#include "transport/route.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cascade {

Scheme RankLinkScheme(int from_node, int to_node, bool nccl_data_plane) {
  const bool same_node = from_node >= 0 && from_node == to_node;
  return nccl_data_plane && same_node ? Scheme::kNccl : Scheme::kMpi;
}

TransportFactory RouteActivationsByNode(TransportFactory mpi, std::vector<int> node_of_rank,
                                        int this_node, bool nccl_data_plane) {
  TransportFactory routed = mpi;
  routed.activation =
      [mpi = std::move(mpi), nodes = std::move(node_of_rank), this_node, nccl_data_plane](
          const Address& a,
          const SenderOptions& o) -> absl::StatusOr<std::unique_ptr<ActivationSender>> {
    const bool known = a.rank >= 0 && a.rank < static_cast<int>(nodes.size());
    const int to_node = known ? nodes[a.rank] : -1;
    if (RankLinkScheme(this_node, to_node, nccl_data_plane) == Scheme::kNccl) {
      return MakeActivationSender(absl::StrCat("nccl://", a.rank), o);
    }
    return mpi.activation(a, o);
  };
  return routed;
}

}  // namespace cascade
