#include "model/gguf.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/checked_math.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian

// Size in bytes of a fixed-size GGUF scalar type, or 0 for string/array/unknown.
uint64_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool KnownType(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufType::kFloat64); }

// Bounds-checked little-endian cursor over the file. Every read names what it reads so
// that errors point at the field.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  absl::Status Error(const std::string& field, const std::string& problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": GGUF ", field, ": ", problem, " (at byte ", pos_, ")"));
  }

  absl::Status ReadBytes(void* out, uint64_t n, const std::string& field) {
    if (n > remaining()) {
      return Error(field, absl::StrCat("truncated: needs ", n, " bytes, ", remaining(),
                                       " left in a file of ", bytes_.size()));
    }
    if (n == 0) return absl::OkStatus();  // an empty array's buffer may be null
    std::memcpy(out, bytes_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<T> Read(const std::string& field) {
    T v{};
    CASCADE_RETURN_IF_ERROR(ReadBytes(&v, sizeof(T), field));
    return v;
  }

  absl::StatusOr<std::string> ReadString(const std::string& field, uint64_t max_len) {
    CASCADE_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(field + " length"));
    if (len > max_len) {
      return Error(field, absl::StrCat("string length ", len, " exceeds the limit of ", max_len));
    }
    if (len > remaining()) {
      return Error(field, absl::StrCat("truncated: a string of ", len,
                                       " bytes runs past the end of the file (", remaining(),
                                       " bytes left)"));
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  absl::Status Seek(uint64_t pos, const std::string& field) {
    if (pos > bytes_.size()) {
      return Error(field, absl::StrCat("offset ", pos, " is past the end of the file (size ",
                                       bytes_.size(), ")"));
    }
    pos_ = pos;
    return absl::OkStatus();
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& file_;
  uint64_t pos_ = 0;
};

absl::Status ReadArray(Reader& r, const std::string& field, int depth, GgufArray* out);

absl::Status ReadValue(Reader& r, GgufType type, const std::string& field, int depth,
                       GgufValue* out) {
  out->type = type;
  switch (type) {
    case GgufType::kUint8: {
      CASCADE_ASSIGN_OR_RETURN(out->u, r.Read<uint8_t>(field));
      return absl::OkStatus();
    }
    case GgufType::kInt8: {
      CASCADE_ASSIGN_OR_RETURN(out->i, r.Read<int8_t>(field));
      return absl::OkStatus();
    }
    case GgufType::kUint16: {
      CASCADE_ASSIGN_OR_RETURN(out->u, r.Read<uint16_t>(field));
      return absl::OkStatus();
    }
    case GgufType::kInt16: {
      CASCADE_ASSIGN_OR_RETURN(out->i, r.Read<int16_t>(field));
      return absl::OkStatus();
    }
    case GgufType::kUint32: {
      CASCADE_ASSIGN_OR_RETURN(out->u, r.Read<uint32_t>(field));
      return absl::OkStatus();
    }
    case GgufType::kInt32: {
      CASCADE_ASSIGN_OR_RETURN(out->i, r.Read<int32_t>(field));
      return absl::OkStatus();
    }
    case GgufType::kUint64: {
      CASCADE_ASSIGN_OR_RETURN(out->u, r.Read<uint64_t>(field));
      return absl::OkStatus();
    }
    case GgufType::kInt64: {
      CASCADE_ASSIGN_OR_RETURN(out->i, r.Read<int64_t>(field));
      return absl::OkStatus();
    }
    case GgufType::kFloat32: {
      CASCADE_ASSIGN_OR_RETURN(out->f, r.Read<float>(field));
      return absl::OkStatus();
    }
    case GgufType::kFloat64: {
      CASCADE_ASSIGN_OR_RETURN(out->f, r.Read<double>(field));
      return absl::OkStatus();
    }
    case GgufType::kBool: {
      CASCADE_ASSIGN_OR_RETURN(uint8_t b, r.Read<uint8_t>(field));
      if (b > 1) return r.Error(field, absl::StrCat("bool value ", int{b}, " is neither 0 nor 1"));
      out->u = b;
      return absl::OkStatus();
    }
    case GgufType::kString: {
      CASCADE_ASSIGN_OR_RETURN(out->str, r.ReadString(field, GgufFile::kMaxStringBytes));
      return absl::OkStatus();
    }
    case GgufType::kArray:
      return ReadArray(r, field, depth + 1, &out->array);
  }
  return r.Error(field, absl::StrCat("unknown value type ", static_cast<uint32_t>(type)));
}

absl::Status ReadArray(Reader& r, const std::string& field, int depth, GgufArray* out) {
  if (depth > GgufFile::kMaxArrayDepth) {
    return r.Error(field, absl::StrCat("arrays nested deeper than ", GgufFile::kMaxArrayDepth));
  }
  CASCADE_ASSIGN_OR_RETURN(uint32_t raw_type, r.Read<uint32_t>(field + " element type"));
  if (!KnownType(raw_type)) {
    return r.Error(field, absl::StrCat("unknown array element type ", raw_type));
  }
  out->elem_type = static_cast<GgufType>(raw_type);
  CASCADE_ASSIGN_OR_RETURN(out->size, r.Read<uint64_t>(field + " element count"));
  if (out->size > GgufFile::kMaxArrayElems) {
    return r.Error(field, absl::StrCat("array of ", out->size, " elements exceeds the limit of ",
                                       GgufFile::kMaxArrayElems));
  }
  const uint64_t elem_size = ScalarSize(out->elem_type);
  if (elem_size > 0) {
    uint64_t total;
    if (!CheckedMul(out->size, elem_size, &total) || total > r.remaining()) {
      return r.Error(field, absl::StrCat("array of ", out->size, " ", GgufTypeName(out->elem_type),
                                         " runs past the end of the file"));
    }
    out->raw.resize(total);
    CASCADE_RETURN_IF_ERROR(r.ReadBytes(out->raw.data(), total, field));
    if (out->elem_type == GgufType::kBool) {
      for (uint8_t b : out->raw) {
        if (b > 1) return r.Error(field, "bool array element is neither 0 nor 1");
      }
    }
    return absl::OkStatus();
  }
  // Strings take at least 8 bytes each, arrays at least 12: reject absurd counts before
  // reserving memory.
  const uint64_t min_elem = out->elem_type == GgufType::kString ? 8 : 12;
  if (out->size > r.remaining() / min_elem) {
    return r.Error(field,
                   absl::StrCat("array of ", out->size, " ", GgufTypeName(out->elem_type),
                                " cannot fit in the ", r.remaining(), " bytes left in the file"));
  }
  if (out->elem_type == GgufType::kString) {
    out->strings.reserve(out->size);
    for (uint64_t i = 0; i < out->size; ++i) {
      CASCADE_ASSIGN_OR_RETURN(
          std::string s, r.ReadString(absl::StrCat(field, "[", i, "]"), GgufFile::kMaxStringBytes));
      out->strings.push_back(std::move(s));
    }
    return absl::OkStatus();
  }
  out->arrays.resize(out->size);
  for (uint64_t i = 0; i < out->size; ++i) {
    CASCADE_RETURN_IF_ERROR(
        ReadArray(r, absl::StrCat(field, "[", i, "]"), depth + 1, &out->arrays[i]));
  }
  return absl::OkStatus();
}

}  // namespace

const char* GgufTypeName(GgufType t) {
  static constexpr const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                           "int32",  "float32", "bool",   "string", "array",
                                           "uint64", "int64",   "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

bool GgufArray::is_integer() const {
  switch (elem_type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kBool:
      return true;
    default:
      return false;
  }
}

bool GgufArray::is_float() const {
  return elem_type == GgufType::kFloat32 || elem_type == GgufType::kFloat64;
}

int64_t GgufArray::GetInt(uint64_t i) const {
  const uint8_t* p = raw.data() + i * ScalarSize(elem_type);
  switch (elem_type) {
    case GgufType::kUint8:
    case GgufType::kBool:
      return *p;
    case GgufType::kInt8:
      return static_cast<int8_t>(*p);
    case GgufType::kUint16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case GgufType::kInt16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case GgufType::kUint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case GgufType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case GgufType::kUint64:
    case GgufType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return static_cast<int64_t>(GetFloat(i));
    default:
      return 0;
  }
}

double GgufArray::GetFloat(uint64_t i) const {
  const uint8_t* p = raw.data() + i * ScalarSize(elem_type);
  if (elem_type == GgufType::kFloat32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (elem_type == GgufType::kFloat64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  return static_cast<double>(GetInt(i));
}

std::string GgufValue::DebugString(size_t max_elems) const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64:
      return absl::StrCat(u);
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      return absl::StrCat(i);
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return absl::StrCat(f);
    case GgufType::kBool:
      return u ? "true" : "false";
    case GgufType::kString:
      return str.size() > 80 ? absl::StrCat("\"", str.substr(0, 77), "...\"")
                             : absl::StrCat("\"", str, "\"");
    case GgufType::kArray: {
      std::string s = absl::StrCat("[", GgufTypeName(array.elem_type), " x ", array.size, "]");
      return s;
    }
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  CASCADE_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = path;
  f->bytes_ = mapped->bytes();
  f->file_ = std::move(mapped);
  CASCADE_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::span<const uint8_t> bytes,
                                                          const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->name_ = name;
  f->bytes_ = bytes;
  CASCADE_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

absl::Status GgufFile::ParseAll() {
  Reader r(bytes_, name_);
  if (bytes_.size() < 4) return r.Error("magic", "file is too short to be GGUF");
  CASCADE_ASSIGN_OR_RETURN(uint32_t magic, r.Read<uint32_t>("magic"));
  if (magic != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": GGUF magic: not a GGUF file (expected bytes 'GGUF')"));
  }
  CASCADE_ASSIGN_OR_RETURN(version_, r.Read<uint32_t>("version"));
  if (version_ == 1) {
    return absl::UnimplementedError(
        absl::StrCat(name_,
                     ": GGUF version: version 1 files (32-bit counts) are not supported; "
                     "convert the model again"));
  }
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffff) == 0) {
      return r.Error("version", absl::StrCat("version ", version_,
                                             " looks byte-swapped (a big-endian file?)"));
    }
    return r.Error("version", absl::StrCat("unsupported version ", version_, " (2 and 3 are)"));
  }
  CASCADE_ASSIGN_OR_RETURN(uint64_t n_tensors, r.Read<uint64_t>("tensor_count"));
  CASCADE_ASSIGN_OR_RETURN(uint64_t n_kv, r.Read<uint64_t>("metadata_kv_count"));
  if (n_tensors > kMaxTensors) {
    return r.Error("tensor_count",
                   absl::StrCat(n_tensors, " tensors exceed the limit of ", kMaxTensors));
  }
  if (n_kv > kMaxKeys) {
    return r.Error("metadata_kv_count", absl::StrCat(n_kv, " keys exceed the limit of ", kMaxKeys));
  }
  // Each key-value takes at least 8 (key length) + 4 (type) + 1 bytes.
  if (n_kv > r.remaining() / 13) {
    return r.Error("metadata_kv_count",
                   absl::StrCat(n_kv, " keys cannot fit in a file of ", bytes_.size(), " bytes"));
  }

  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string where = absl::StrCat("metadata key #", k);
    CASCADE_ASSIGN_OR_RETURN(std::string key, r.ReadString(where, 65535));
    if (key.empty()) return r.Error(where, "empty key");
    const std::string field = absl::StrCat("metadata '", key, "'");
    CASCADE_ASSIGN_OR_RETURN(uint32_t raw_type, r.Read<uint32_t>(field + " type"));
    if (!KnownType(raw_type)) {
      return r.Error(field, absl::StrCat("unknown value type ", raw_type));
    }
    GgufValue value;
    CASCADE_RETURN_IF_ERROR(ReadValue(r, static_cast<GgufType>(raw_type), field, 0, &value));
    if (metadata_.count(key) != 0) return r.Error(field, "duplicate key");
    metadata_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* a = Find("general.alignment")) {
    if (a->type != GgufType::kUint32) {
      return r.Error("metadata 'general.alignment'",
                     absl::StrCat("has type ", GgufTypeName(a->type), ", expected uint32"));
    }
    if (a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > 65536) {
      return r.Error("metadata 'general.alignment'",
                     absl::StrCat("alignment ", a->u, " is not a power of two up to 65536"));
    }
    alignment_ = a->u;
  }

  // Tensor infos take at least 8 + 4 + 4 + 8 bytes each.
  if (n_tensors > r.remaining() / 24) {
    return r.Error("tensor_count", absl::StrCat(n_tensors, " tensor infos cannot fit in the ",
                                                r.remaining(), " bytes left"));
  }
  tensors_.reserve(n_tensors);
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo info;
    CASCADE_ASSIGN_OR_RETURN(info.name, r.ReadString(absl::StrCat("tensor #", t, " name"), 1024));
    const std::string field = absl::StrCat("tensor '", info.name, "'");
    if (info.name.empty()) return r.Error(absl::StrCat("tensor #", t), "empty name");
    CASCADE_ASSIGN_OR_RETURN(uint32_t n_dims, r.Read<uint32_t>(field + " n_dims"));
    if (n_dims == 0 || n_dims > 4) {
      return r.Error(field, absl::StrCat("n_dims ", n_dims, " is not in 1..4"));
    }
    info.n_dims = static_cast<int>(n_dims);
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      CASCADE_ASSIGN_OR_RETURN(uint64_t dim, r.Read<uint64_t>(absl::StrCat(field, " dim ", d)));
      if (dim == 0 || dim > (uint64_t{1} << 40)) {
        return r.Error(field, absl::StrCat("dimension ", d, " has absurd size ", dim));
      }
      if (!CheckedMul(elems, dim, &elems) || elems > (uint64_t{1} << 48)) {
        return r.Error(field, "element count overflows");
      }
      info.ne[d] = static_cast<int64_t>(dim);
    }
    CASCADE_ASSIGN_OR_RETURN(uint32_t raw_type, r.Read<uint32_t>(field + " type"));
    auto traits = LookupTensorType(raw_type);
    if (!traits) {
      return r.Error(field, absl::StrCat("unknown tensor type ", raw_type));
    }
    info.type = traits->type;
    if (info.ne[0] % traits->block_elems != 0) {
      return r.Error(field, absl::StrCat("row length ", info.ne[0], " is not a multiple of the ",
                                         traits->name, " block size ", traits->block_elems));
    }
    uint64_t row_bytes;
    if (!RowBytes(info.type, static_cast<uint64_t>(info.ne[0]), &row_bytes) ||
        !CheckedMul(row_bytes, elems / static_cast<uint64_t>(info.ne[0]), &info.nbytes)) {
      return r.Error(field, "byte size overflows");
    }
    CASCADE_ASSIGN_OR_RETURN(info.offset, r.Read<uint64_t>(field + " offset"));
    if (info.offset % alignment_ != 0) {
      return r.Error(field, absl::StrCat("data offset ", info.offset,
                                         " is not a multiple of the alignment ", alignment_));
    }
    if (tensor_index_.count(info.name) != 0) return r.Error(field, "duplicate tensor name");
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  if (!CheckedAlignUp(r.pos(), alignment_, &data_offset_)) {
    return r.Error("data section", "offset overflows");
  }
  if (!tensors_.empty() && data_offset_ > bytes_.size()) {
    return r.Error("data section",
                   absl::StrCat("starts at ", data_offset_, ", past the end of the file (size ",
                                bytes_.size(), ")"));
  }
  for (auto& info : tensors_) {
    uint64_t start;
    if (!CheckedAdd(data_offset_, info.offset, &start) ||
        !RangeWithin(start, info.nbytes, bytes_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, ": GGUF tensor '", info.name, "': data [", info.offset, ", +", info.nbytes,
          ") lies past the end of the file (data section at ", data_offset_, ", file size ",
          bytes_.size(), "); the file may be truncated"));
    }
    info.data = bytes_.data() + start;
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::Prefetch() const {
  if (file_) file_->Prefetch();
}

namespace {
absl::Status WrongType(const std::string& file, std::string_view key, GgufType got,
                       const char* want) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": GGUF metadata '", std::string(key),
                                                 "' has type ", GgufTypeName(got), ", expected ",
                                                 want));
}
absl::Status Missing(const std::string& file, std::string_view key) {
  return absl::NotFoundError(
      absl::StrCat(file, ": GGUF metadata '", std::string(key), "' is missing"));
}
}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (v->type != GgufType::kString) return WrongType(name_, key, v->type, "string");
  return v->str;
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  switch (v->type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
      return static_cast<int64_t>(v->u);
    case GgufType::kUint64:
      if (v->u > static_cast<uint64_t>(INT64_MAX)) {
        return absl::InvalidArgumentError(
            absl::StrCat(name_, ": GGUF metadata '", std::string(key), "' value too large"));
      }
      return static_cast<int64_t>(v->u);
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      return v->i;
    default:
      return WrongType(name_, key, v->type, "an integer");
  }
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (v->type == GgufType::kFloat32 || v->type == GgufType::kFloat64) return v->f;
  auto as_int = GetInt(key);
  if (as_int.ok()) return static_cast<double>(*as_int);
  return WrongType(name_, key, v->type, "a number");
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (v->type != GgufType::kBool) return WrongType(name_, key, v->type, "bool");
  return v->u != 0;
}

absl::StatusOr<const GgufArray*> GgufFile::GetArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (v->type != GgufType::kArray) return WrongType(name_, key, v->type, "array");
  return &v->array;
}

absl::StatusOr<int64_t> GgufFile::GetIntOr(std::string_view key, int64_t fallback) const {
  if (!Find(key)) return fallback;
  return GetInt(key);
}

absl::StatusOr<double> GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  if (!Find(key)) return fallback;
  return GetFloat(key);
}

absl::StatusOr<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  if (!Find(key)) return fallback;
  return GetBool(key);
}

}  // namespace cascade
