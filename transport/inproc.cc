#include "transport/inproc.h"

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "util/bounded_queue.h"
#include "util/logging.h"

namespace cascade {
namespace {

using FrameQueue = BoundedQueue<StageFrame>;

class InProcessSender : public ActivationSender {
 public:
  explicit InProcessSender(std::shared_ptr<FrameQueue> q) : q_(std::move(q)) {}
  absl::Status Send(StageFrame frame) override {
    if (!q_->Push(std::move(frame))) return absl::UnavailableError("in-process link is closed");
    return absl::OkStatus();
  }
  void Close() override { q_->Close(); }

 private:
  std::shared_ptr<FrameQueue> q_;
};

class InProcessReceiver : public ActivationReceiver {
 public:
  explicit InProcessReceiver(std::shared_ptr<FrameQueue> q) : q_(std::move(q)) {}
  std::optional<StageFrame> Receive() override { return q_->Pop(); }
  void Close() override { q_->Close(); }

 private:
  std::shared_ptr<FrameQueue> q_;
};

// One registered endpoint. Deliveries hold `mu` shared for the call; the endpoint's
// destructor takes it exclusively to retire the handlers, so no delivery runs into
// handlers whose targets are gone (the owner closes its inbox first, so a delivery blocked
// on a full inbox returns).
struct EndpointState {
  absl::Mutex mu;
  bool alive ABSL_GUARDED_BY(mu) = true;
  DataPlaneHandlers handlers;  // written before the state is shared
};

// The process's named endpoints.
class Endpoints {
 public:
  static Endpoints& Get() {
    static Endpoints* e = new Endpoints();  // never destroyed: senders may outlive main
    return *e;
  }
  absl::Status Add(const std::string& name, std::shared_ptr<EndpointState> state)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (!map_.emplace(name, std::move(state)).second) {
      return absl::AlreadyExistsError(absl::StrCat("inproc://", name, " is already registered"));
    }
    return absl::OkStatus();
  }
  void Remove(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<EndpointState> state;
    {
      absl::MutexLock lock(&mu_);
      auto it = map_.find(name);
      if (it == map_.end()) return;
      state = std::move(it->second);
      map_.erase(it);
    }
    absl::WriterMutexLock lock(&state->mu);
    state->alive = false;
  }
  std::shared_ptr<EndpointState> Find(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = map_.find(name);
    return it == map_.end() ? nullptr : it->second;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<EndpointState>> map_ ABSL_GUARDED_BY(mu_);
};

absl::Status Gone(const std::string& name) {
  return absl::UnavailableError(absl::StrCat("inproc://", name, " is not registered"));
}

class InProcActivationSender : public ActivationSender {
 public:
  InProcActivationSender(std::string name, std::string key)
      : name_(std::move(name)), key_(std::move(key)) {}
  absl::Status Send(StageFrame frame) override {
    if (closed_.load()) return absl::UnavailableError("link is closed");
    std::shared_ptr<EndpointState> e = Endpoints::Get().Find(name_);
    if (!e || e->handlers.frames == nullptr) return Gone(name_);
    v1::ActivationFrame wire;
    EncodeFrame(frame, key_, &wire);
    absl::ReaderMutexLock lock(&e->mu);
    if (!e->alive) return Gone(name_);
    auto delivered = e->handlers.frames->Deliver(wire, "this process");
    if (!delivered.ok()) return absl::UnavailableError(delivered.status().message());
    if (*delivered) rejected_.fetch_add(1);
    return absl::OkStatus();
  }
  void Close() override { closed_.store(true); }
  uint64_t rejected() const override { return rejected_.load(); }

 private:
  const std::string name_;
  const std::string key_;
  std::atomic<bool> closed_{false};
  std::atomic<uint64_t> rejected_{0};
};

class InProcResultSender : public ResultSender {
 public:
  InProcResultSender(std::string name, std::string key)
      : name_(std::move(name)), key_(std::move(key)) {}
  absl::Status Send(StepResult result) override {
    if (closed_.load()) return absl::UnavailableError("link is closed");
    std::shared_ptr<EndpointState> e = Endpoints::Get().Find(name_);
    if (!e || !e->handlers.results) return Gone(name_);
    v1::StepResult wire;
    EncodeResult(result, key_, &wire);
    absl::ReaderMutexLock lock(&e->mu);
    if (!e->alive) return Gone(name_);
    if (absl::Status st = e->handlers.results(wire, "this process"); !st.ok()) {
      return absl::UnavailableError(st.message());
    }
    return absl::OkStatus();
  }
  void Close() override { closed_.store(true); }

 private:
  const std::string name_;
  const std::string key_;
  std::atomic<bool> closed_{false};
};

}  // namespace

InProcessLink MakeInProcessLink(size_t capacity) {
  auto q = std::make_shared<FrameQueue>(capacity);
  return {std::make_unique<InProcessSender>(q), std::make_unique<InProcessReceiver>(q)};
}

absl::StatusOr<std::unique_ptr<InProcEndpoint>> InProcEndpoint::Register(
    const std::string& name, DataPlaneHandlers handlers) {
  auto state = std::make_shared<EndpointState>();
  state->handlers = std::move(handlers);
  if (absl::Status st = Endpoints::Get().Add(name, std::move(state)); !st.ok()) return st;
  return std::unique_ptr<InProcEndpoint>(new InProcEndpoint(name));
}

InProcEndpoint::~InProcEndpoint() { Endpoints::Get().Remove(name_); }

std::unique_ptr<ActivationSender> MakeInProcActivationSender(const std::string& name,
                                                             const std::string& link_key) {
  return std::make_unique<InProcActivationSender>(name, link_key);
}

std::unique_ptr<ResultSender> MakeInProcResultSender(const std::string& name,
                                                     const std::string& link_key) {
  return std::make_unique<InProcResultSender>(name, link_key);
}

}  // namespace cascade
