// A progress bar on stderr for long loads, drawn only when stderr is a terminal.
//
// Contract: not thread-safe (one loader thread updates it). Finish() (or the destructor)
// ends the line. When stderr is not a terminal every call is a no-op.
#ifndef CASCADE_UTIL_PROGRESS_H_
#define CASCADE_UTIL_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace cascade {

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total);
  ~ProgressBar();
  void Update(uint64_t done);
  void Finish();
  bool enabled() const { return enabled_; }

 private:
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool finished_ = false;
  int last_permille_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace cascade

#endif  // CASCADE_UTIL_PROGRESS_H_
