#include "transport/mpi_link.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "parallel/mpi_util.h"
#include "transport/grpc_util.h"
#include "util/logging.h"

namespace cascade {
namespace {

std::string RankName(int rank) { return absl::StrCat("mpi://", rank); }

// How long a send may wait for a peer to take a message (a stopped rank).
constexpr auto kSendTimeout = std::chrono::seconds(30);
// After a message or a ring, the receiver tests MPI every kHotStep for kHotFor (a rung
// message may still be on its way; a ring drained with an earlier one must not wait).
constexpr auto kHotFor = std::chrono::microseconds(300);
constexpr auto kSpinFor = std::chrono::microseconds(100);  // first, without sleeping
constexpr auto kHotStep = std::chrono::microseconds(20);

// What differs between the two kinds of link: the message, its encoder, its tag and how
// this rank delivers one to itself.
struct FrameLink {
  using Item = StageFrame;
  using Wire = v1::ActivationFrame;
  static constexpr MpiTag kTag = MpiTag::kActivation;
  static void Encode(const StageFrame& f, std::string_view key, Wire* w) { EncodeFrame(f, key, w); }
  static void DeliverHere(MpiDataPlane* p, int rank, const Wire& w) { p->DeliverFrame(rank, w); }
};
struct ResultLink {
  using Item = StepResult;
  using Wire = v1::StepResult;
  static constexpr MpiTag kTag = MpiTag::kResult;
  static void Encode(const StepResult& r, std::string_view key, Wire* w) {
    EncodeResult(r, key, w);
  }
  static void DeliverHere(MpiDataPlane* p, int rank, const Wire& w) { p->DeliverResult(rank, w); }
};

// A link to `rank`: one Send at a time, so the messages stay in order.
template <class Base, class Link>
class MpiSender : public Base {
 public:
  MpiSender(MpiDataPlane* plane, int rank, const SenderOptions& o)
      : plane_(plane), rank_(rank), key_(o.link_key) {}
  absl::Status Send(typename Link::Item item) override {
    absl::MutexLock lock(&mu_);
    if (closed_.load()) {
      return absl::UnavailableError(absl::StrCat("link to ", RankName(rank_), " is closed"));
    }
    Link::Encode(item, key_, &wire_);
    if (rank_ == plane_->rank()) {  // this rank itself: no MPI, no polling
      Link::DeliverHere(plane_, rank_, wire_);
      return absl::OkStatus();
    }
    return plane_->SendBytes(rank_, Link::kTag,
                             std::make_shared<const std::string>(wire_.SerializeAsString()),
                             &stop_);
  }
  void Close() override { closed_.store(true); }
  void Abort() override {
    stop_.store(true);
    closed_.store(true);
  }

 private:
  MpiDataPlane* const plane_;
  const int rank_;
  const std::string key_;
  std::atomic<bool> closed_{false}, stop_{false};
  absl::Mutex mu_;
  typename Link::Wire wire_ ABSL_GUARDED_BY(mu_);
};

class MpiActivationSender : public MpiSender<ActivationSender, FrameLink> {
 public:
  MpiActivationSender(MpiDataPlane* plane, int rank, const SenderOptions& o)
      : MpiSender(plane, rank, o), rejected_(plane->RejectionCounter(rank)) {}
  uint64_t rejected() const override { return rejected_->load(); }

 private:
  std::shared_ptr<std::atomic<uint64_t>> rejected_;
};

using MpiResultSender = MpiSender<ResultSender, ResultLink>;

class MpiListener : public DataPlaneListener {
 public:
  MpiListener(MpiDataPlane* plane, DataPlaneHandlers h) : plane_(plane), handlers_(std::move(h)) {}
  ~MpiListener() override { plane_->ClearHandlers(handlers_); }
  std::string address() const override { return plane_->address(); }

 private:
  MpiDataPlane* const plane_;
  const DataPlaneHandlers handlers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MpiDataPlane>> MpiDataPlane::Start(MPI_Comm world,
                                                                 int max_message_bytes) {
  std::unique_ptr<MpiDataPlane> p(new MpiDataPlane());
  p->max_bytes_ = max_message_bytes;
  if (absl::Status st = MpiError(MPI_Comm_dup(world, &p->comm_), "MPI data plane: MPI_Comm_dup");
      !st.ok()) {
    return st;
  }
  MPI_Comm_set_errhandler(p->comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(p->comm_, &p->rank_);
  MPI_Comm_size(p->comm_, &p->size_);
  auto doorbell = MpiDoorbell::Create(world);
  if (!doorbell.ok()) return doorbell.status();
  p->doorbell_ = std::move(*doorbell);
  p->receiver_ = std::thread([q = p.get()] { q->ReceiveLoop(); });
  p->deliverer_ = std::thread([q = p.get()] { q->DeliverLoop(); });
  return p;
}

MpiDataPlane::~MpiDataPlane() { Shutdown(); }

std::string MpiDataPlane::address() const { return RankName(rank_); }

void MpiDataPlane::RegisterWithFactory() { RegisterTransport(Scheme::kMpi, Factory()); }

TransportFactory MpiDataPlane::Factory() {
  TransportFactory f;
  auto check = [this](const Address& a) -> absl::Status {
    if (a.rank < 0 || a.rank >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(FormatAddress(a), ": this MPI job has ",
                                                     size_, " ranks"));
    }
    return absl::OkStatus();
  };
  f.activation = [this, check](const Address& a, const SenderOptions& o)
      -> absl::StatusOr<std::unique_ptr<ActivationSender>> {
    if (absl::Status st = check(a); !st.ok()) return st;
    return MakeActivationSender(a.rank, o);
  };
  f.result = [this, check](const Address& a,
                           const SenderOptions& o) -> absl::StatusOr<std::unique_ptr<ResultSender>> {
    if (absl::Status st = check(a); !st.ok()) return st;
    return MakeResultSender(a.rank, o);
  };
  f.listen = [this](DataPlaneHandlers h) -> absl::StatusOr<std::unique_ptr<DataPlaneListener>> {
    if (absl::Status st = SetHandlers(h); !st.ok()) return st;
    return std::unique_ptr<DataPlaneListener>(std::make_unique<MpiListener>(this, std::move(h)));
  };
  return f;
}

absl::Status MpiDataPlane::SetHandlers(const DataPlaneHandlers& h) {
  absl::MutexLock frames(&frames_mu_);
  absl::MutexLock results(&results_mu_);
  if ((h.frames && router_) || (h.results && results_)) {
    return absl::AlreadyExistsError(
        absl::StrCat("the MPI data plane of rank ", rank_, " already delivers that kind"));
  }
  if (h.frames) router_ = h.frames;
  if (h.results) results_ = h.results;
  return absl::OkStatus();
}

void MpiDataPlane::ClearHandlers(const DataPlaneHandlers& h) {
  if (h.frames) {
    absl::MutexLock lock(&frames_mu_);
    if (router_ == h.frames) router_ = nullptr;
  }
  if (h.results) {
    absl::MutexLock lock(&results_mu_);
    results_ = nullptr;
  }
}

std::shared_ptr<std::atomic<uint64_t>> MpiDataPlane::RejectionCounter(int rank) {
  absl::MutexLock lock(&mu_);
  auto& c = rejections_[rank];
  if (!c) c = std::make_shared<std::atomic<uint64_t>>(0);
  return c;
}

absl::StatusOr<std::unique_ptr<ActivationSender>> MpiDataPlane::MakeActivationSender(
    int rank, const SenderOptions& options) {
  return std::unique_ptr<ActivationSender>(
      std::make_unique<MpiActivationSender>(this, rank, options));
}

absl::StatusOr<std::unique_ptr<ResultSender>> MpiDataPlane::MakeResultSender(
    int rank, const SenderOptions& options) {
  return std::unique_ptr<ResultSender>(std::make_unique<MpiResultSender>(this, rank, options));
}

absl::Status MpiDataPlane::SendBytes(int rank, MpiTag tag, std::shared_ptr<const std::string> bytes,
                                     const std::atomic<bool>* stop) {
  const std::string peer = RankName(rank);
  if (bytes->size() > static_cast<size_t>(max_bytes_)) {
    return absl::InvalidArgumentError(absl::StrCat("a message of ", bytes->size(),
                                                   " bytes to ", peer, " is over the limit of ",
                                                   max_bytes_));
  }
  if (stop_.load()) return absl::UnavailableError("the MPI data plane is shut down");
  MPI_Request req;
  if (absl::Status st =
          MpiError(MPI_Isend(bytes->data(), static_cast<int>(bytes->size()), MPI_BYTE, rank,
                             static_cast<int>(tag), comm_, &req),
                   absl::StrCat("link to ", peer, " is down"));
      !st.ok()) {
    return st;
  }
  doorbell_->Ring(rank);  // the receiver looks now, not at its next timeout
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    int done = 0;
    MPI_Status status;
    if (int rc = MPI_Test(&req, &done, &status); rc != MPI_SUCCESS) {
      return MpiError(rc, absl::StrCat("link to ", peer, " is down"));
    }
    if (done) return absl::OkStatus();
    const auto waited = std::chrono::steady_clock::now() - start;
    const bool given_up = (stop != nullptr && stop->load()) || stop_.load();
    if (given_up || waited > kSendTimeout) {
      pending_.Add(req, std::move(bytes));  // MPI may still read it
      return absl::UnavailableError(
          given_up ? absl::StrCat("link to ", peer, " is closing")
                   : absl::StrCat(peer, " has not taken a message for ",
                                  std::chrono::duration_cast<std::chrono::seconds>(kSendTimeout).count(),
                                  " s"));
    }
    if (waited < std::chrono::microseconds(50)) continue;
    MpiBackoff(waited);
  }
}

void MpiDataPlane::ReceiveLoop() {
  // Test MPI in short steps for a moment after a message or a ring (more may follow, or
  // the rung message may still be on its way), then sleep until the doorbell rings (or,
  // for a lost ring, a timeout: short while recently busy, long once idle).
  auto active = std::chrono::steady_clock::now();
  uint64_t passes = 0;
  while (!stop_.load()) {
    if (++passes % 1024 == 0) pending_.Reap();
    // With the frame queue full, take only results and acks: a full inbox holds back the
    // frames into this stage, never the results the coordinator waits for.
    const bool frames_room = queued_frames_.load() < 4;
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    int rc = MPI_Improbe(MPI_ANY_SOURCE, frames_room ? MPI_ANY_TAG : static_cast<int>(MpiTag::kResult),
                         comm_, &flag, &msg, &status);
    if (rc == MPI_SUCCESS && !flag && !frames_room) {
      rc = MPI_Improbe(MPI_ANY_SOURCE, static_cast<int>(MpiTag::kAck), comm_, &flag, &msg, &status);
    }
    if (rc != MPI_SUCCESS) {
      spdlog::error("{}", MpiError(rc, "MPI data plane: probe").message());
      MpiBackoff(std::chrono::seconds(1));
      continue;
    }
    if (!flag) {
      const auto quiet = std::chrono::steady_clock::now() - active;
      if (quiet < kSpinFor) {
        continue;  // a rung message is usually visible within microseconds
      } else if (quiet < kHotFor) {
        MpiBackoff(std::chrono::microseconds(0), {.hot = kHotStep});
      } else if (doorbell_->Wait(quiet < std::chrono::seconds(1) ? std::chrono::milliseconds(5)
                                                                  : std::chrono::milliseconds(50))) {
        active = std::chrono::steady_clock::now();
      }
      continue;
    }
    active = std::chrono::steady_clock::now();
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    const int source = status.MPI_SOURCE, tag = status.MPI_TAG;
    if (count < 0 || count > max_bytes_) {
      oversized_.fetch_add(1);
      MpiDiscard(&msg, count);
      spdlog::warn("MPI data plane: dropped a message of {} bytes from {} (tag {}): over the "
                   "limit of {} bytes",
                   count < 0 ? std::string("more than 2^31") : std::to_string(count),
                   RankName(source), tag, max_bytes_);
      continue;
    }
    std::string body(static_cast<size_t>(count), '\0');
    MPI_Request req;
    absl::Status st = MpiError(MPI_Imrecv(body.data(), count, MPI_BYTE, &msg, &req),
                               absl::StrCat("MPI data plane: receive from ", RankName(source)));
    if (st.ok()) st = MpiWait(&req, absl::StrCat("receive from ", RankName(source)), &stop_);
    if (!st.ok()) {
      if (!stop_.load()) spdlog::error("{}", st.message());
      continue;
    }
    Dispatch(source, tag, std::move(body));
  }
}

void MpiDataPlane::Dispatch(int source, int tag, std::string body) {
  const std::string peer = RankName(source);
  switch (static_cast<MpiTag>(tag)) {
    case MpiTag::kActivation: {
      Inbound in;
      in.source = source;
      if (!in.frame.ParseFromString(body)) {
        spdlog::warn("MPI data plane: an activation frame from {} does not parse; dropped", peer);
        return;
      }
      DeliverFrame(source, std::move(in.frame));
      return;
    }
    case MpiTag::kResult: {
      v1::StepResult r;
      if (!r.ParseFromString(body)) {
        spdlog::warn("MPI data plane: a step result from {} does not parse; dropped", peer);
        return;
      }
      DeliverResult(source, r);
      return;
    }
    case MpiTag::kNcclHeader: {
      TagHandler h;
      {
        absl::MutexLock lock(&mu_);
        auto it = tag_handlers_.find(tag);
        if (it != tag_handlers_.end()) h = it->second;
      }
      if (!h) {
        spdlog::warn("MPI data plane: an NCCL frame header from {} arrived at rank {}, which has "
                     "no NCCL data plane; dropped",
                     peer, rank_);
        return;
      }
      h(source, std::move(body));
      return;
    }
    case MpiTag::kAck: {
      v1::FrameAck ack;
      if (!ack.ParseFromString(body)) return;
      if (!ack.error().empty()) {
        RejectionCounter(source)->fetch_add(1);
        spdlog::warn("{} refused frame {}: {}", peer, ack.batch_id(), ack.error());
      }
      return;
    }
  }
  spdlog::warn("MPI data plane: a message with unknown tag {} from {}; dropped", tag, peer);
}

void MpiDataPlane::SetTagHandler(MpiTag tag, TagHandler handler) {
  absl::MutexLock lock(&mu_);
  tag_handlers_[static_cast<int>(tag)] = std::move(handler);
}

void MpiDataPlane::DeliverFrame(int source, v1::ActivationFrame frame) {
  Inbound in;
  in.source = source;
  in.frame = std::move(frame);
  queued_frames_.fetch_add(1);
  if (!frames_.Push(std::move(in))) queued_frames_.fetch_sub(1);
}

void MpiDataPlane::DeliverResult(int source, const v1::StepResult& r) {
  const std::string peer = RankName(source);
  absl::MutexLock lock(&results_mu_);
  if (!results_) {
    spdlog::warn("MPI data plane: a step result from {} arrived at rank {}, which takes none; "
                 "dropped",
                 peer, rank_);
    return;
  }
  if (absl::Status st = results_(r, peer); !st.ok()) {
    spdlog::warn("MPI data plane: result from {} refused: {}", peer, st.message());
  }
}

void MpiDataPlane::DeliverLoop() {
  while (std::optional<Inbound> in = frames_.Pop()) {
    queued_frames_.fetch_sub(1);
    const std::string peer = RankName(in->source);
    absl::StatusOr<std::optional<v1::FrameAck>> ack;
    {
      absl::MutexLock lock(&frames_mu_);
      if (router_ == nullptr) {
        spdlog::warn("MPI data plane: frame {} from {} arrived at rank {}, which runs no stage; "
                     "dropped",
                     in->frame.batch_id(), peer, rank_);
        continue;
      }
      ack = router_->Deliver(in->frame, peer);
    }
    if (ack.ok() && ack->has_value()) SendAck(in->source, **ack);
  }
}

void MpiDataPlane::SendAck(int rank, const v1::FrameAck& ack) {
  auto bytes = std::make_shared<const std::string>(ack.SerializeAsString());
  MPI_Request req;
  if (MPI_Isend(bytes->data(), static_cast<int>(bytes->size()), MPI_BYTE, rank,
                static_cast<int>(MpiTag::kAck), comm_, &req) != MPI_SUCCESS) {
    return;
  }
  doorbell_->Ring(rank);
  pending_.Add(req, std::move(bytes));  // reaped once sent
}

void MpiDataPlane::Shutdown() {
  if (stop_.exchange(true)) return;
  if (doorbell_) doorbell_->Wake();
  frames_.Close();
  if (receiver_.joinable()) receiver_.join();
  if (deliverer_.joinable()) deliverer_.join();
  UnregisterTransport(Scheme::kMpi);
}

}  // namespace cascade
