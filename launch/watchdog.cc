#include "launch/watchdog.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "parallel/mpi_util.h"

namespace cascade {
namespace {

constexpr int kNoticeTag = 7;

// Why the process `pid` on this machine cannot be a live rank any more, or "".
std::string ProcessGone(int64_t pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return "its process is gone";
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const size_t paren = text.rfind(')');
  if (paren != std::string::npos && paren + 2 < text.size()) {
    const char state = text[paren + 2];
    if (state == 'Z' || state == 'X') return "its process has died";
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<RankWatchdog>> RankWatchdog::Start(MPI_Comm world,
                                                                  std::vector<v1::RankInfo> ranks,
                                                                  WatchdogOptions options) {
  std::unique_ptr<RankWatchdog> w(new RankWatchdog());
  if (absl::Status st = MpiError(MPI_Comm_dup(world, &w->comm_), "watchdog: MPI_Comm_dup");
      !st.ok()) {
    return st;
  }
  MPI_Comm_set_errhandler(w->comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w->comm_, &w->rank_);
  w->ranks_ = std::move(ranks);
  w->options_ = std::move(options);
  {
    absl::MutexLock lock(&w->mu_);
    w->last_seen_.assign(w->ranks_.size(), std::chrono::steady_clock::now());
    w->left_.assign(w->ranks_.size(), false);
    w->gone_at_.assign(w->ranks_.size(), std::chrono::steady_clock::time_point());
    w->gone_why_.assign(w->ranks_.size(), std::string());
  }
  w->thread_ = std::thread([p = w.get()] { p->Loop(); });
  w->local_thread_ = std::thread([p = w.get()] { p->LocalLoop(); });
  return w;
}

RankWatchdog::~RankWatchdog() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  if (local_thread_.joinable()) local_thread_.join();
  // Sends still in flight (to a rank that left) are left to MPI_Finalize.
}

std::string RankWatchdog::Describe(int rank) const {
  const v1::RankInfo& r = ranks_[rank];
  return absl::StrCat("rank ", rank, " (pid ", r.pid(), " on ", r.host(), ")");
}

std::optional<RankWatchdog::Lost> RankWatchdog::FindLost() {
  if (standing_down_.load()) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  if (told_lost_) return told_lost_;
  // This machine's ranks first; of those gone, the one seen gone first.
  NoteLocalGoneLocked(now);
  int first = -1;
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    if (r == rank_ || left_[r] || gone_why_[r].empty()) continue;
    if (first < 0 || gone_at_[r] < gone_at_[first]) first = r;
  }
  if (first >= 0) return Lost{first, absl::StrCat(Describe(first), ": ", gone_why_[first])};
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    if (r == rank_ || left_[r]) continue;
    const bool watched = rank_ == 0 || r == 0;
    if (watched && now - last_seen_[r] > options_.timeout) {
      return Lost{
          r, absl::StrCat(
                 Describe(r), ": no heartbeat for ",
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - last_seen_[r]).count(),
                 " ms (stopped, hung, or its machine is unreachable)")};
    }
  }
  return std::nullopt;
}

void RankWatchdog::Send(int to, const v1::RankNotice& notice) {
  auto bytes = std::make_shared<const std::string>(notice.SerializeAsString());
  MPI_Request req;
  if (MPI_Isend(bytes->data(), static_cast<int>(bytes->size()), MPI_BYTE, to, kNoticeTag, comm_,
                &req) != MPI_SUCCESS) {
    return;
  }
  sends_.Add(req, std::move(bytes));
}

void RankWatchdog::ExitLost(const Lost& lost, bool tell) {
  const auto start = std::chrono::steady_clock::now();
  if (lost.rank == rank_) {
    std::fprintf(stderr, "cascade-mpi rank %d: the job ended because this rank was lost: %s\n",
                 rank_, lost.what.c_str());
  } else {
    std::fprintf(stderr, "cascade-mpi rank %d: lost %s; ending the job\n", rank_,
                 lost.what.c_str());
  }
  std::fflush(stderr);
  if (tell) {
    // Every rank learns which rank was lost, so that none takes this one for it.
    v1::RankNotice n;
    n.set_kind(v1::RankNotice::LOST);
    n.set_rank(lost.rank);
    n.set_reason(lost.what);
    for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
      if (r != rank_) Send(r, n);
    }
  }
  // The notices sent, and time for this machine's ranks (who check every 250 ms) to find
  // the lost rank themselves before this one is gone too.
  const auto deadline = start + std::chrono::milliseconds(600);
  while (std::chrono::steady_clock::now() < deadline) {
    sends_.Reap();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::_Exit(kExitRankLost);
}

void RankWatchdog::BroadcastStop() {
  v1::RankNotice n;
  n.set_kind(v1::RankNotice::STOP);
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    if (r != rank_) Send(r, n);
  }
}

void RankWatchdog::Receive() {
  for (;;) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, kNoticeTag, comm_, &flag, &msg, &status) != MPI_SUCCESS ||
        !flag) {
      return;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    if (count < 0 || count > (1 << 16)) {  // a notice is small: never sized from a big claim
      MpiDiscard(&msg, count);
      continue;
    }
    std::string body(static_cast<size_t>(count), '\0');
    if (MPI_Mrecv(body.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS) continue;
    v1::RankNotice n;
    if (!n.ParseFromString(body)) continue;
    const int from = status.MPI_SOURCE;
    switch (n.kind()) {
      case v1::RankNotice::HEARTBEAT: {
        absl::MutexLock lock(&mu_);
        last_seen_[from] = std::chrono::steady_clock::now();
        break;
      }
      case v1::RankNotice::LEAVING: {
        absl::MutexLock lock(&mu_);
        left_[from] = true;
        break;
      }
      case v1::RankNotice::STOP:
        standing_down_.store(true);
        if (!stop_seen_.exchange(true) && options_.on_stop) options_.on_stop();
        break;
      case v1::RankNotice::LOST: {
        Lost lost{n.rank(), n.reason().empty()
                                ? absl::StrCat("a rank (told by rank ", from, ")")
                                : n.reason()};
        {
          absl::MutexLock lock(&mu_);
          left_[from] = true;  // it leaves because of the loss
          if (!told_lost_) told_lost_ = lost;
        }
        if (standing_down_.load()) break;
        ExitLost(lost, /*tell=*/false);
      }
      default:
        break;
    }
  }
}

void RankWatchdog::NoteLocalGoneLocked(std::chrono::steady_clock::time_point now) {
  const std::string& my_host = ranks_[rank_].host();
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    if (r == rank_ || ranks_[r].host() != my_host || !gone_why_[r].empty()) continue;
    if (std::string why = ProcessGone(ranks_[r].pid()); !why.empty()) {
      gone_why_[r] = std::move(why);
      gone_at_[r] = now;
    }
  }
}

void RankWatchdog::LocalLoop() {
  while (!stop_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto now = std::chrono::steady_clock::now();
    absl::MutexLock lock(&mu_);
    NoteLocalGoneLocked(now);
  }
}

void RankWatchdog::Loop() {
  using Clock = std::chrono::steady_clock;
  auto next_beat = Clock::now();
  auto next_check = Clock::now() + std::chrono::milliseconds(250);
  const int size = static_cast<int>(ranks_.size());
  while (!stop_.load()) {
    Receive();
    sends_.Reap();
    const auto now = Clock::now();
    if (now >= next_beat) {
      next_beat = now + options_.interval;
      v1::RankNotice beat;
      beat.set_kind(standing_down_.load() ? v1::RankNotice::LEAVING : v1::RankNotice::HEARTBEAT);
      for (int r = 0; r < size; ++r) {
        if (r == rank_ || !(rank_ == 0 || r == 0)) continue;
        bool silent;
        {
          absl::MutexLock lock(&mu_);
          silent = left_[r] || now - last_seen_[r] > 2 * options_.interval + std::chrono::seconds(1);
        }
        // No heartbeats pile up for a rank that does not take them.
        if (!silent || beat.kind() == v1::RankNotice::LEAVING) Send(r, beat);
      }
    }
    if (now >= next_check) {
      next_check = now + std::chrono::milliseconds(250);
      if (std::optional<Lost> lost = FindLost()) ExitLost(*lost);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace cascade
