// Secrets: random keys and tokens, their comparison, and reading them from files.
//
// Contract: RandomSecret draws from the kernel's CSPRNG (getrandom) and aborts only if the
// kernel cannot give randomness at all. SecretsEqual takes time independent of where the
// inputs differ (for equal lengths), so comparing a presented token leaks nothing through
// timing. ReadSecretFile names the file on error and refuses an empty secret. Thread-safe.
#ifndef CASCADE_UTIL_SECRET_H_
#define CASCADE_UTIL_SECRET_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cascade {

// `bytes` random bytes, written as 2 * bytes lowercase hex digits (text that may travel
// anywhere text goes: gRPC metadata, files, logs never see it).
std::string RandomSecret(size_t bytes = 16);
// A random 64-bit id, never 0 (plan ids, registry sessions), from the same source.
uint64_t RandomId();
bool SecretsEqual(absl::string_view a, absl::string_view b);
// Whether an HTTP or gRPC "authorization" value is "Bearer <key>" (the scheme in any
// case, RFC 7235; the key compared as SecretsEqual does; nothing is allocated). Never for
// an empty key.
bool BearerMatches(absl::string_view authorization, absl::string_view key);
// The file's contents without surrounding whitespace (a trailing newline is common).
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace cascade

#endif  // CASCADE_UTIL_SECRET_H_
