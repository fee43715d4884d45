#include "util/secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/mapped_file.h"

namespace cascade {

namespace {

void FillRandom(char* out, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::getrandom(out + done, bytes - done, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      std::abort();  // no randomness from the kernel: nothing secure can be made
    }
    done += static_cast<size_t>(got);
  }
}

}  // namespace

uint64_t RandomId() {
  uint64_t id = 0;
  FillRandom(reinterpret_cast<char*>(&id), sizeof(id));
  return id | 1;
}

std::string RandomSecret(size_t bytes) {
  std::string raw(bytes, '\0');
  FillRandom(raw.data(), bytes);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

bool SecretsEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

bool BearerMatches(absl::string_view authorization, absl::string_view key) {
  constexpr absl::string_view kScheme = "Bearer ";  // the scheme's case does not matter
  if (key.empty() || !absl::StartsWithIgnoreCase(authorization, kScheme)) return false;
  return SecretsEqual(authorization.substr(kScheme.size()), key);
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  auto text = ReadFileToString(path, 64 << 10);
  if (!text.ok()) return text.status();
  std::string secret(absl::StripAsciiWhitespace(*text));
  if (secret.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": the secret is empty"));
  return secret;
}

}  // namespace cascade
