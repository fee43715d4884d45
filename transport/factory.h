// One factory for the data plane's sending ends: the scheme of an address (see
// transport/address.h) picks the transport. Transports that need libraries the core does
// not link (MPI, NCCL) register themselves at start-up (RegisterTransport), so the
// coordinator and the worker stay free of them unless the binary is built with them.
//
// Contract: thread-safe. An address that does not parse is InvalidArgument naming it; a
// scheme no transport has registered for is Unimplemented naming the scheme and what
// provides it. Connections are made lazily: a sender to an unreachable peer is created
// fine and its first Send fails (Unavailable), so a stage can load before its neighbour.
#ifndef CASCADE_TRANSPORT_FACTORY_H_
#define CASCADE_TRANSPORT_FACTORY_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/address.h"
#include "transport/inbox.h"
#include "transport/link.h"

namespace cascade {

absl::StatusOr<std::unique_ptr<ActivationSender>> MakeActivationSender(
    const std::string& address, const SenderOptions& options = {});
absl::StatusOr<std::unique_ptr<ResultSender>> MakeResultSender(const std::string& address,
                                                              const SenderOptions& options = {});

// The receiving side of a registered transport in this process: what arrives goes to the
// handlers given to ListenOnTransport until the listener is destroyed.
class DataPlaneListener {
 public:
  virtual ~DataPlaneListener() = default;
  // Where peers send to (e.g. mpi://3).
  virtual std::string address() const = 0;
};

// How a registered transport makes senders for its scheme, and receives.
struct TransportFactory {
  std::function<absl::StatusOr<std::unique_ptr<ActivationSender>>(const Address&,
                                                                  const SenderOptions&)>
      activation;
  std::function<absl::StatusOr<std::unique_ptr<ResultSender>>(const Address&,
                                                              const SenderOptions&)>
      result;
  std::function<absl::StatusOr<std::unique_ptr<DataPlaneListener>>(DataPlaneHandlers)> listen;
};
// For schemes outside the core (mpi, nccl); replaces an earlier registration.
void RegisterTransport(Scheme scheme, TransportFactory factory);
void UnregisterTransport(Scheme scheme);
// Receives on a registered transport (Unimplemented, naming what provides it, when none is).
absl::StatusOr<std::unique_ptr<DataPlaneListener>> ListenOnTransport(Scheme scheme,
                                                                     DataPlaneHandlers handlers);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_FACTORY_H_
