#include "parallel/inproc_collective.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace cascade {

class InProcessGroup::Rank : public Collective {
 public:
  Rank(InProcessGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }
  MemoryKind memory_kind() const override { return MemoryKind::kHost; }
  std::string name() const override {
    return absl::StrCat("in-process group of ", group_->size_);
  }
  absl::Status AllGather(const void* send, size_t bytes, void* recv) override {
    return group_->Round(rank_, epoch_++, send, bytes, -1, recv);
  }
  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= group_->size_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast from rank ", root, " of ",
                                                     group_->size_));
    }
    return group_->Round(rank_, epoch_++, data, bytes, root, data);
  }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return HostAllReduceSum(*this, data, count, &scratch_);
  }

 private:
  InProcessGroup* const group_;
  const int rank_;
  uint64_t epoch_ = 0;
  std::vector<float> scratch_;
};

InProcessGroup::InProcessGroup(int size) : size_(size) {
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(this, r));
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < 2; ++i) {
    slots_[i].epoch = static_cast<uint64_t>(i);
    slots_[i].parts.resize(size);
  }
}

InProcessGroup::~InProcessGroup() = default;

Collective& InProcessGroup::rank(int r) { return *ranks_[r]; }

void InProcessGroup::Abort(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (aborted_.empty()) aborted_ = reason.empty() ? "aborted" : reason;
}

absl::Status InProcessGroup::Round(int rank, uint64_t epoch, const void* send, size_t bytes,
                                   int from, void* recv) {
  absl::MutexLock lock(&mu_);
  Slot& s = slots_[epoch % 2];
  auto turn = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !aborted_.empty() || s.epoch == epoch;
  };
  mu_.Await(absl::Condition(&turn));
  if (!aborted_.empty()) return absl::UnavailableError(aborted_);
  if (from < 0 || from == rank) {
    s.parts[rank].assign(static_cast<const char*>(send), bytes);
  }
  ++s.arrived;
  auto everyone = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !aborted_.empty() || s.arrived == size_;
  };
  mu_.Await(absl::Condition(&everyone));
  if (!aborted_.empty()) return absl::UnavailableError(aborted_);
  absl::Status st;
  if (from < 0) {
    for (int r = 0; r < size_; ++r) {
      if (s.parts[r].size() != bytes) {
        st = absl::InternalError(absl::StrCat("all-gather: rank ", r, " gave ", s.parts[r].size(),
                                              " bytes, rank ", rank, " expected ", bytes));
        break;
      }
      std::memcpy(static_cast<char*>(recv) + r * bytes, s.parts[r].data(), bytes);
    }
  } else if (rank != from) {
    if (s.parts[from].size() != bytes) {
      st = absl::InternalError(absl::StrCat("broadcast: the root gave ", s.parts[from].size(),
                                            " bytes, rank ", rank, " expected ", bytes));
    } else {
      std::memcpy(recv, s.parts[from].data(), bytes);
    }
  }
  if (++s.departed == size_) {
    s.arrived = 0;
    s.departed = 0;
    s.epoch += 2;
  }
  return st;
}

}  // namespace cascade
