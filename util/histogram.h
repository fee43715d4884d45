// Histogram: counts of observations in fixed buckets, with their sum, in the shape
// Prometheus exposes (cumulative "le" buckets are computed when rendered).
//
// Contract: bounds are strictly increasing and fixed at construction; an observation x
// falls in the first bucket whose bound is >= x, or in the overflow (+Inf) bucket. NaN is
// ignored. Merge() needs the same bounds (checked: a histogram of other bounds is not
// merged and Merge returns false). Plain data; thread-compatible (callers lock).
#ifndef CASCADE_UTIL_HISTOGRAM_H_
#define CASCADE_UTIL_HISTOGRAM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace cascade {

class Histogram {
 public:
  Histogram() = default;
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  void Observe(double x) {
    if (std::isnan(x)) return;
    const size_t i = static_cast<size_t>(
        std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin());
    ++counts_[i];
    sum_ += x;
    ++count_;
  }
  bool Merge(const Histogram& o) {
    if (o.bounds_ != bounds_) return false;
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
    sum_ += o.sum_;
    count_ += o.count_;
    return true;
  }

  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative); the last is the overflow bucket.
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

  // Rebuilds one from its parts (e.g. off the wire); false when they do not fit together.
  static bool FromParts(std::vector<double> bounds, std::vector<uint64_t> counts, double sum,
                        Histogram* out) {
    if (counts.size() != bounds.size() + 1) return false;
    for (size_t i = 1; i < bounds.size(); ++i) {
      if (!(bounds[i] > bounds[i - 1])) return false;
    }
    uint64_t n = 0;
    for (uint64_t c : counts) {
      if (n + c < n) return false;
      n += c;
    }
    out->bounds_ = std::move(bounds);
    out->counts_ = std::move(counts);
    out->sum_ = sum;
    out->count_ = n;
    return true;
  }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_ = {0};
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Bucket bounds for latencies, in seconds: 1 ms to 60 s.
inline std::vector<double> LatencyBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
          0.75,  1.0,    1.5,   2.5,  5.0,   10.0, 20.0,  30.0, 60.0};
}

}  // namespace cascade

#endif  // CASCADE_UTIL_HISTOGRAM_H_
