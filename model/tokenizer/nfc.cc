#include "model/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "util/utf8.h"

namespace cascade::tok {
namespace {

#include "model/tokenizer/nfc_data.inc"

constexpr int32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr int32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

struct NfcTables {
  absl::flat_hash_map<int32_t, std::pair<int32_t, int32_t>> decomp;
  absl::flat_hash_map<uint64_t, int32_t> compose;  // (first << 32 | second) -> composite

  NfcTables() {
    constexpr size_t n = sizeof(kNfcDecomp) / sizeof(kNfcDecomp[0]);
    for (size_t i = 0; i + 2 < n; i += 3) {
      const int32_t cp = static_cast<int32_t>(kNfcDecomp[i] & 0x7fffffff);
      const int32_t a = static_cast<int32_t>(kNfcDecomp[i + 1]);
      const int32_t b = static_cast<int32_t>(kNfcDecomp[i + 2]);
      decomp[cp] = {a, b};
      if (kNfcDecomp[i] & 0x80000000u) {
        compose[(static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b)] = cp;
      }
    }
  }
};

const NfcTables& Tables() {
  static const NfcTables* const tables = new NfcTables();
  return *tables;
}

int CombiningClass(int32_t cp) {
  if (cp < 0x300) return 0;
  constexpr size_t n = sizeof(kNfcCcc) / sizeof(kNfcCcc[0]) / 3;
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (kNfcCcc[mid * 3 + 1] < static_cast<uint32_t>(cp)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < n && kNfcCcc[lo * 3] <= static_cast<uint32_t>(cp)) {
    return static_cast<int>(kNfcCcc[lo * 3 + 2]);
  }
  return 0;
}

void Decompose(int32_t cp, const NfcTables& t, std::vector<int32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  auto it = t.decomp.find(cp);
  if (it == t.decomp.end()) {
    out->push_back(cp);
    return;
  }
  Decompose(it->second.first, t, out);
  if (it->second.second != 0) Decompose(it->second.second, t, out);
}

int32_t Compose(int32_t a, int32_t b, const NfcTables& t) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  auto it = t.compose.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
  return it == t.compose.end() ? -1 : it->second;
}

}  // namespace

absl::StatusOr<std::string> NfcNormalize(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);

  const NfcTables& t = Tables();
  std::vector<int32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    int len;
    const int32_t cp = DecodeUtf8(text, pos, &len);
    if (cp < 0) {
      return absl::InvalidArgumentError(absl::StrCat("NFC: text is not valid UTF-8 at byte ", pos));
    }
    Decompose(cp, t, &cps);
    pos += len;
  }
  // Canonical ordering: stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (CombiningClass(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && CombiningClass(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](int32_t a, int32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = j;
  }
  // Canonical composition (UAX #15).
  if (!cps.empty()) {
    size_t starter = 0;
    int last_class = CombiningClass(cps[0]) == 0 ? 0 : 256;
    size_t kept = 1;
    for (size_t i = 1; i < cps.size(); ++i) {
      const int32_t cp = cps[i];
      const int cls = CombiningClass(cp);
      const int32_t composite =
          (last_class < cls || last_class == 0) ? Compose(cps[starter], cp, t) : -1;
      if (composite >= 0 && (last_class < cls || last_class == 0)) {
        cps[starter] = composite;
        continue;
      }
      if (cls == 0) starter = kept;
      last_class = cls;
      cps[kept++] = cp;
    }
    cps.resize(kept);
  }
  std::string out;
  out.reserve(text.size());
  for (int32_t cp : cps) AppendUtf8(cp, &out);
  return out;
}

}  // namespace cascade::tok
