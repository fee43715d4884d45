// Which transport carries activations between two ranks of one MPI job (cascade-mpi).
//
// Between the GPU stages of one node, activations go GPU to GPU over NCCL (nccl://RANK,
// transport/nccl_link.h); to a rank of another node, or when this rank runs no NCCL data
// plane (CPU stages, a build without NCCL), they go over MPI (mpi://RANK,
// transport/mpi_link.h). Results and rejection notices always go over MPI. The launcher
// knows which node each rank is on (launch/topology.h); these functions only apply the rule.
//
// Contract: RankLinkScheme is pure. RouteActivationsByNode returns a factory that is
// thread-safe as far as `mpi` and the registered nccl:// transport are; it makes nccl://
// senders through the factory (MakeActivationSender), so the NCCL data plane must be
// registered before such a sender is made, or that sender is refused (Unimplemented).
#ifndef CASCADE_TRANSPORT_ROUTE_H_
#define CASCADE_TRANSPORT_ROUTE_H_

#include <vector>

#include "transport/address.h"
#include "transport/factory.h"

namespace cascade {

// The scheme for activations from a rank on node `from_node` to a rank on node `to_node`
// (node indices; a negative one is unknown and matches no node), given whether this rank
// runs the NCCL data plane: kNccl between two ranks of one node with NCCL, kMpi otherwise.
Scheme RankLinkScheme(int from_node, int to_node, bool nccl_data_plane);

// The MPI data plane's factory `mpi`, with each activation sender to mpi://R made for
// RankLinkScheme(this_node, node_of_rank[R], nccl_data_plane): nccl://R or `mpi`'s own.
// A rank outside node_of_rank goes to `mpi` (which refuses it, naming the job's size).
// Result senders and the receiving side are `mpi`'s.
TransportFactory RouteActivationsByNode(TransportFactory mpi, std::vector<int> node_of_rank,
                                        int this_node, bool nccl_data_plane);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_ROUTE_H_
