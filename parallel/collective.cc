#include "parallel/collective.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

// Lengths travel as 8 little-endian bytes, whatever the host's byte order.
void PutU64(uint64_t v, unsigned char* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t GetU64(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{in[i]} << (8 * i);
  return v;
}

// A string longer than this is refused before any buffer is sized from a peer's length.
constexpr uint64_t kMaxCollectiveString = uint64_t{1} << 31;

}  // namespace

void SumPartsInRankOrder(const float* parts, int n, int64_t count, float* out) {
  if (out != parts) std::memcpy(out, parts, static_cast<size_t>(count) * sizeof(float));
  for (int r = 1; r < n; ++r) {
    const float* p = parts + static_cast<int64_t>(r) * count;
    for (int64_t i = 0; i < count; ++i) out[i] += p[i];
  }
}

absl::Status HostAllReduceSum(Collective& c, float* data, int64_t count,
                              std::vector<float>* scratch) {
  if (count < 0) return absl::InvalidArgumentError("all-reduce of a negative count");
  const int n = c.size();
  if (n == 1 || count == 0) return absl::OkStatus();
  scratch->resize(static_cast<size_t>(count) * n);
  CASCADE_RETURN_IF_ERROR(
      c.AllGather(data, static_cast<size_t>(count) * sizeof(float), scratch->data()));
  SumPartsInRankOrder(scratch->data(), n, count, data);
  return absl::OkStatus();
}

absl::Status BroadcastString(Collective& c, std::string* s, int root) {
  unsigned char len[8];
  if (c.rank() == root) PutU64(s->size(), len);
  CASCADE_RETURN_IF_ERROR(c.Broadcast(len, sizeof(len), root));
  const uint64_t n = GetU64(len);
  if (n > kMaxCollectiveString) {
    return absl::DataLossError(
        absl::StrCat(c.name(), ": a broadcast claims ", n, " bytes, over the limit"));
  }
  if (c.rank() != root) s->resize(n);
  if (n == 0) return absl::OkStatus();
  return c.Broadcast(s->data(), n, root);
}

absl::StatusOr<std::vector<std::string>> AllGatherStrings(Collective& c, const std::string& mine) {
  const int n = c.size();
  unsigned char len[8];
  PutU64(mine.size(), len);
  std::vector<unsigned char> lens(8 * static_cast<size_t>(n));
  CASCADE_RETURN_IF_ERROR(c.AllGather(len, 8, lens.data()));
  uint64_t longest = 0;
  std::vector<uint64_t> sizes(n);
  for (int r = 0; r < n; ++r) {
    sizes[r] = GetU64(lens.data() + 8 * r);
    if (sizes[r] > kMaxCollectiveString / static_cast<uint64_t>(n)) {
      return absl::DataLossError(
          absl::StrCat(c.name(), ": rank ", r, " claims ", sizes[r], " bytes, over the limit"));
    }
    longest = std::max(longest, sizes[r]);
  }
  std::vector<std::string> out(n);
  if (longest == 0) return out;
  std::string padded(longest, '\0');
  std::memcpy(padded.data(), mine.data(), mine.size());
  std::string all(longest * n, '\0');
  CASCADE_RETURN_IF_ERROR(c.AllGather(padded.data(), longest, all.data()));
  for (int r = 0; r < n; ++r) out[r] = all.substr(longest * r, sizes[r]);
  return out;
}

}  // namespace cascade
