// Helpers for tests that read the shared models and vectors in ../shared.
//
// Contract: SharedPath() joins a relative path to the shared folder configured at build
// time (CASCADE_SHARED_DIR). Tests that need a file call CASCADE_REQUIRE_SHARED(path),
// which skips the test (reported as SKIPPED, never as passed) when the file is absent.
#ifndef CASCADE_MODEL_TEST_UTIL_H_
#define CASCADE_MODEL_TEST_UTIL_H_

#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace cascade::testing {

inline std::string SharedDir() {
  if (const char* env = std::getenv("CASCADE_SHARED_DIR")) return env;
#ifdef CASCADE_SHARED_DIR
  return CASCADE_SHARED_DIR;
#else
  return "../shared";
#endif
}

inline std::string SharedPath(const std::string& rel) { return SharedDir() + "/" + rel; }

inline bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace cascade::testing

#define CASCADE_REQUIRE_SHARED(path)                                    \
  do {                                                                  \
    if (!::cascade::testing::PathExists(path)) {                        \
      GTEST_SKIP() << "shared test data not found: " << (path)          \
                   << " (set CASCADE_SHARED_DIR to the shared folder)"; \
    }                                                                   \
  } while (0)

#endif  // CASCADE_MODEL_TEST_UTIL_H_
