// In-process data plane: links between stages that are threads of one process.
//
// - MakeInProcessLink: both ends of a bounded queue of frames (LocalPipeline, tests).
//   Frames are passed as they are, without encoding: both ends are this process's code.
// - InProcEndpoint: a named receiving end ("inproc://name") that frame and result senders
//   made by the transport factory deliver to. Frames go through the same FrameRouter
//   validation as frames from the network, so a stage cannot tell where a frame came from.
// - CallbackResultSender: results handed to a function.
//
// Contract: thread-safe. A sender to an inproc:// name that is not registered fails with
// Unavailable naming it; an endpoint unregisters when destroyed, after which its senders
// fail the same way.
#ifndef CASCADE_TRANSPORT_INPROC_H_
#define CASCADE_TRANSPORT_INPROC_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/inbox.h"
#include "transport/link.h"

namespace cascade {

struct InProcessLink {
  std::unique_ptr<ActivationSender> sender;
  std::unique_ptr<ActivationReceiver> receiver;
};
InProcessLink MakeInProcessLink(size_t capacity = 8);

class CallbackResultSender : public ResultSender {
 public:
  explicit CallbackResultSender(std::function<absl::Status(StepResult)> fn) : fn_(std::move(fn)) {}
  absl::Status Send(StepResult result) override { return fn_(std::move(result)); }

 private:
  std::function<absl::Status(StepResult)> fn_;
};

class InProcEndpoint {
 public:
  // Registers `name`; AlreadyExists if another endpoint holds it. The handlers' targets
  // must outlive the endpoint.
  static absl::StatusOr<std::unique_ptr<InProcEndpoint>> Register(const std::string& name,
                                                                  DataPlaneHandlers handlers);
  ~InProcEndpoint();
  std::string address() const { return "inproc://" + name_; }

 private:
  explicit InProcEndpoint(std::string name) : name_(std::move(name)) {}
  const std::string name_;
};

// Senders to a registered endpoint (the transport factory's inproc:// case).
// Senders to a registered endpoint (the transport factory's inproc:// case); every frame
// carries `link_key`.
std::unique_ptr<ActivationSender> MakeInProcActivationSender(const std::string& name,
                                                             const std::string& link_key);
std::unique_ptr<ResultSender> MakeInProcResultSender(const std::string& name,
                                                     const std::string& link_key);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_INPROC_H_
