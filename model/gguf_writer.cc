#include "model/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

class ByteSink {
 public:
  explicit ByteSink(const std::function<absl::Status(const void*, size_t)>& out) : out_(out) {}
  absl::Status Bytes(const void* p, size_t n) {
    pos_ += n;
    return out_(p, n);
  }
  template <typename T>
  absl::Status Pod(T v) {
    return Bytes(&v, sizeof(T));
  }
  absl::Status String(const std::string& s) {
    CASCADE_RETURN_IF_ERROR(Pod<uint64_t>(s.size()));
    return Bytes(s.data(), s.size());
  }
  absl::Status Pad(uint64_t alignment) {
    static const uint8_t zeros[256] = {};
    while (pos_ % alignment != 0) {
      size_t n = std::min<uint64_t>(alignment - pos_ % alignment, sizeof(zeros));
      CASCADE_RETURN_IF_ERROR(Bytes(zeros, n));
    }
    return absl::OkStatus();
  }
  uint64_t pos() const { return pos_; }

 private:
  const std::function<absl::Status(const void*, size_t)>& out_;
  uint64_t pos_ = 0;
};

absl::Status WriteArray(ByteSink& s, const GgufArray& a);

absl::Status WriteValue(ByteSink& s, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kUint8:
      return s.Pod<uint8_t>(static_cast<uint8_t>(v.u));
    case GgufType::kInt8:
      return s.Pod<int8_t>(static_cast<int8_t>(v.i));
    case GgufType::kUint16:
      return s.Pod<uint16_t>(static_cast<uint16_t>(v.u));
    case GgufType::kInt16:
      return s.Pod<int16_t>(static_cast<int16_t>(v.i));
    case GgufType::kUint32:
      return s.Pod<uint32_t>(static_cast<uint32_t>(v.u));
    case GgufType::kInt32:
      return s.Pod<int32_t>(static_cast<int32_t>(v.i));
    case GgufType::kUint64:
      return s.Pod<uint64_t>(v.u);
    case GgufType::kInt64:
      return s.Pod<int64_t>(v.i);
    case GgufType::kFloat32:
      return s.Pod<float>(static_cast<float>(v.f));
    case GgufType::kFloat64:
      return s.Pod<double>(v.f);
    case GgufType::kBool:
      return s.Pod<uint8_t>(v.u ? 1 : 0);
    case GgufType::kString:
      return s.String(v.str);
    case GgufType::kArray:
      return WriteArray(s, v.array);
  }
  return absl::InvalidArgumentError("gguf writer: unknown value type");
}

absl::Status WriteArray(ByteSink& s, const GgufArray& a) {
  CASCADE_RETURN_IF_ERROR(s.Pod<uint32_t>(static_cast<uint32_t>(a.elem_type)));
  CASCADE_RETURN_IF_ERROR(s.Pod<uint64_t>(a.size));
  if (a.elem_type == GgufType::kString) {
    for (const auto& str : a.strings) CASCADE_RETURN_IF_ERROR(s.String(str));
  } else if (a.elem_type == GgufType::kArray) {
    for (const auto& sub : a.arrays) CASCADE_RETURN_IF_ERROR(WriteArray(s, sub));
  } else {
    CASCADE_RETURN_IF_ERROR(s.Bytes(a.raw.data(), a.raw.size()));
  }
  return absl::OkStatus();
}

}  // namespace

void GgufWriter::SetValue(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::SetString(const std::string& key, const std::string& value) {
  GgufValue v;
  v.type = GgufType::kString;
  v.str = value;
  SetValue(key, std::move(v));
}

void GgufWriter::SetUint32(const std::string& key, uint32_t value) {
  GgufValue v;
  v.type = GgufType::kUint32;
  v.u = value;
  SetValue(key, std::move(v));
}

void GgufWriter::SetInt32(const std::string& key, int32_t value) {
  GgufValue v;
  v.type = GgufType::kInt32;
  v.i = value;
  SetValue(key, std::move(v));
}

void GgufWriter::SetFloat32(const std::string& key, float value) {
  GgufValue v;
  v.type = GgufType::kFloat32;
  v.f = value;
  SetValue(key, std::move(v));
}

void GgufWriter::SetBool(const std::string& key, bool value) {
  GgufValue v;
  v.type = GgufType::kBool;
  v.u = value ? 1 : 0;
  SetValue(key, std::move(v));
}

void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.array.elem_type = GgufType::kString;
  v.array.size = values.size();
  v.array.strings = values;
  SetValue(key, std::move(v));
}

void GgufWriter::SetFloat32Array(const std::string& key, const std::vector<float>& values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.array.elem_type = GgufType::kFloat32;
  v.array.size = values.size();
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  v.array.raw.assign(bytes, bytes + values.size() * 4);  // (no memcpy: data() may be null)
  SetValue(key, std::move(v));
}

void GgufWriter::SetInt32Array(const std::string& key, const std::vector<int32_t>& values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.array.elem_type = GgufType::kInt32;
  v.array.size = values.size();
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  v.array.raw.assign(bytes, bytes + values.size() * 4);  // (no memcpy: data() may be null)
  SetValue(key, std::move(v));
}

void GgufWriter::set_alignment(uint32_t alignment) {
  alignment_ = alignment;
  SetUint32("general.alignment", alignment);
}

void GgufWriter::AddTensor(const std::string& name, TensorType type, std::vector<int64_t> ne,
                           std::span<const uint8_t> bytes) {
  Tensor t{name, type, std::move(ne), bytes, nullptr, 0};
  tensors_.push_back(std::move(t));
}

void GgufWriter::AddTensor(const std::string& name, TensorType type, std::vector<int64_t> ne,
                           Producer producer) {
  Tensor t{name, type, std::move(ne), {}, std::move(producer), 0};
  tensors_.push_back(std::move(t));
}

absl::Status GgufWriter::Emit(const std::function<absl::Status(const void*, size_t)>& out) const {
  // Compute sizes and offsets first.
  std::vector<uint64_t> sizes, offsets;
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    uint64_t elems = 1;
    for (int64_t d : t.ne) elems *= static_cast<uint64_t>(d);
    uint64_t row_bytes;
    if (t.ne.empty() || !RowBytes(t.type, static_cast<uint64_t>(t.ne[0]), &row_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gguf writer: tensor '", t.name, "' has a bad shape for its type"));
    }
    const uint64_t nbytes = row_bytes * (elems / static_cast<uint64_t>(t.ne[0]));
    if (!t.producer && t.bytes.size() != nbytes) {
      return absl::InvalidArgumentError(absl::StrCat("gguf writer: tensor '", t.name, "' has ",
                                                     t.bytes.size(), " bytes, expected ", nbytes));
    }
    sizes.push_back(nbytes);
    offsets.push_back(off);
    off += (nbytes + alignment_ - 1) / alignment_ * alignment_;
  }
  ByteSink s(out);
  CASCADE_RETURN_IF_ERROR(s.Bytes("GGUF", 4));
  CASCADE_RETURN_IF_ERROR(s.Pod<uint32_t>(3));
  CASCADE_RETURN_IF_ERROR(s.Pod<uint64_t>(tensors_.size()));
  CASCADE_RETURN_IF_ERROR(s.Pod<uint64_t>(kv_.size()));
  for (const auto& [k, v] : kv_) {
    CASCADE_RETURN_IF_ERROR(s.String(k));
    CASCADE_RETURN_IF_ERROR(s.Pod<uint32_t>(static_cast<uint32_t>(v.type)));
    CASCADE_RETURN_IF_ERROR(WriteValue(s, v));
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    CASCADE_RETURN_IF_ERROR(s.String(t.name));
    CASCADE_RETURN_IF_ERROR(s.Pod<uint32_t>(static_cast<uint32_t>(t.ne.size())));
    for (int64_t d : t.ne) CASCADE_RETURN_IF_ERROR(s.Pod<uint64_t>(static_cast<uint64_t>(d)));
    CASCADE_RETURN_IF_ERROR(s.Pod<uint32_t>(static_cast<uint32_t>(t.type)));
    CASCADE_RETURN_IF_ERROR(s.Pod<uint64_t>(offsets[i]));
  }
  CASCADE_RETURN_IF_ERROR(s.Pad(alignment_));
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    std::span<const uint8_t> data = t.bytes;
    if (t.producer) {
      buf.clear();
      CASCADE_RETURN_IF_ERROR(t.producer(&buf));
      if (buf.size() != sizes[i]) {
        return absl::InternalError(absl::StrCat("gguf writer: producer for '", t.name, "' gave ",
                                                buf.size(), " bytes, expected ", sizes[i]));
      }
      data = buf;
    }
    CASCADE_RETURN_IF_ERROR(s.Bytes(data.data(), data.size()));
    CASCADE_RETURN_IF_ERROR(s.Pad(alignment_));
  }
  return absl::OkStatus();
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!f) return absl::NotFoundError(absl::StrCat(tmp, ": cannot create"));
  absl::Status st = Emit([&](const void* p, size_t n) -> absl::Status {
    if (n > 0 && std::fwrite(p, 1, n, f.get()) != n) {
      return absl::InternalError(absl::StrCat(tmp, ": write failed (disk full?)"));
    }
    return absl::OkStatus();
  });
  if (!st.ok()) {
    f.reset();
    std::remove(tmp.c_str());
    return st;
  }
  if (std::fclose(f.release()) != 0) return absl::InternalError(tmp + ": close failed");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> GgufWriter::Serialize() const {
  std::vector<uint8_t> out;
  CASCADE_RETURN_IF_ERROR(Emit([&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace cascade
