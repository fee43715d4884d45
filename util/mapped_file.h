// Read-only memory mapping of a whole file.
//
// Contract: MappedFile::Open maps the file with PROT_READ and MAP_SHARED; the mapping
// lives as long as the MappedFile object (move-only, unmapped in the destructor). The
// bytes are immutable and may be read from any thread. An empty file maps to an empty
// span. Failures (missing file, permission, not a regular file) name the path.
#ifndef CASCADE_UTIL_MAPPED_FILE_H_
#define CASCADE_UTIL_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace cascade {

class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

  // Asks the kernel to read the whole mapping ahead (best effort, for faster first use).
  void Prefetch() const;

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  uint64_t size_;
};

// Reads a whole (small) file into a string, e.g. a JSON config. Fails above `max_bytes`.
absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             uint64_t max_bytes = uint64_t{1} << 30);

}  // namespace cascade

#endif  // CASCADE_UTIL_MAPPED_FILE_H_
