#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace cascade {

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(total > 0 && ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(uint64_t done) {
  if (!enabled_ || finished_) return;
  if (done > total_) done = total_;
  const int permille = static_cast<int>(done * 1000 / total_);
  if (permille == last_permille_) return;
  last_permille_ = permille;
  constexpr int kWidth = 40;
  const int filled = permille * kWidth / 1000;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "\r%s [", label_.c_str());
  for (int i = 0; i < kWidth; ++i) std::fputc(i < filled ? '#' : '.', stderr);
  std::fprintf(stderr, "] %5.1f%% %6.1f MiB %5.1fs", permille / 10.0,
               static_cast<double>(done) / (1024.0 * 1024.0), secs);
  std::fflush(stderr);
}

void ProgressBar::Finish() {
  if (!enabled_ || finished_) return;
  Update(total_);
  finished_ = true;
  std::fputc('\n', stderr);
}

}  // namespace cascade
