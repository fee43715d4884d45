#include "util/npy.h"

#include <cstring>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/checked_math.h"
#include "util/mapped_file.h"

namespace cascade {

absl::Status WriteNpyF32(const std::string& path, std::span<const int64_t> shape,
                         std::span<const float> data) {
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || !CheckedMul(count, static_cast<uint64_t>(d), &count)) {
      return absl::InvalidArgumentError("npy: bad shape");
    }
  }
  if (count != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy: shape has ", count, " elements but data has ", data.size()));
  }
  std::string shape_str = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) shape_str += ",";
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", shape_str, "), }");
  // magic(6) + version(2) + len(2) + header + '\n' padded to a multiple of 64
  size_t total = 10 + header.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  header.append(pad, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::NotFoundError(absl::StrCat(path, ": cannot create"));
  const char magic[] = "\x93NUMPY\x01\x00";
  out.write(magic, 8);
  uint16_t hlen = static_cast<uint16_t>(header.size());
  char lenb[2] = {static_cast<char>(hlen & 0xff), static_cast<char>(hlen >> 8)};
  out.write(lenb, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::StatusOr<NpyArray> ReadNpyF32(const std::string& path) {
  auto file_or = MappedFile::Open(path);
  if (!file_or.ok()) return file_or.status();
  const auto& file = **file_or;
  auto bytes = file.bytes();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a float32 .npy file: ", why));
  };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) return bad("magic");
  const uint8_t major = bytes[6];
  uint64_t header_len, header_start;
  if (major == 1) {
    header_len = bytes[8] | (uint64_t{bytes[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    header_len = bytes[8] | (uint64_t{bytes[9]} << 8) | (uint64_t{bytes[10]} << 16) |
                 (uint64_t{bytes[11]} << 24);
    header_start = 12;
  } else {
    return bad(absl::StrCat("unsupported version ", major));
  }
  if (!RangeWithin(header_start, header_len, bytes.size())) return bad("truncated header");
  std::string header(reinterpret_cast<const char*>(bytes.data() + header_start), header_len);
  if (header.find("'descr': '<f4'") == std::string::npos) return bad("dtype is not '<f4'");
  if (header.find("'fortran_order': False") == std::string::npos) return bad("not C order");
  size_t s = header.find("'shape': (");
  if (s == std::string::npos) return bad("no shape");
  s += 10;
  size_t e = header.find(')', s);
  if (e == std::string::npos) return bad("unterminated shape");
  NpyArray arr;
  uint64_t count = 1;
  for (absl::string_view part : absl::StrSplit(header.substr(s, e - s), ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 0) return bad("bad shape entry");
    arr.shape.push_back(d);
    if (!CheckedMul(count, static_cast<uint64_t>(d), &count)) return bad("shape overflows");
  }
  const uint64_t data_start = header_start + header_len;
  uint64_t nbytes;
  if (!CheckedMul(count, uint64_t{4}, &nbytes) || !RangeWithin(data_start, nbytes, bytes.size())) {
    return bad("payload shorter than the shape says");
  }
  arr.data.resize(count);
  std::memcpy(arr.data.data(), bytes.data() + data_start, nbytes);
  return arr;
}

}  // namespace cascade
