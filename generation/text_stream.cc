#include "generation/text_stream.h"

#include <algorithm>

namespace cascade {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings,
                       std::span<const int32_t> context)
    : detok_(tokenizer, context), stop_(std::move(stop_strings)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

std::string TextStream::Push(int32_t id, bool* stopped) {
  *stopped = stopped_;
  if (stopped_) return "";
  held_ += detok_.Push(id);
  // Earliest complete stop string.
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    std::string out = held_.substr(0, cut);
    held_.clear();
    stopped_ = *stopped = true;
    return out;
  }
  // Hold back the longest tail that could still grow into a stop string.
  size_t hold = 0;
  for (const auto& s : stop_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string TextStream::Finish() {
  if (stopped_) return "";
  std::string out = held_ + detok_.Flush();
  held_.clear();
  return out;
}

}  // namespace cascade
