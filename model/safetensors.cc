#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "util/checked_math.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

struct DtypeInfo {
  const char* name;
  uint32_t size;
  std::optional<TensorType> type;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", 8, TensorType::kF64},   {"F32", 4, TensorType::kF32}, {"F16", 2, TensorType::kF16},
    {"BF16", 2, TensorType::kBF16}, {"I64", 8, TensorType::kI64}, {"I32", 4, TensorType::kI32},
    {"I16", 2, TensorType::kI16},   {"I8", 1, TensorType::kI8},   {"U64", 8, std::nullopt},
    {"U32", 4, std::nullopt},       {"U16", 2, std::nullopt},     {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt},      {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
    {"F8_E8M0", 1, std::nullopt},
};

const DtypeInfo* FindDtype(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  CASCADE_ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->name_ = path;
  f->bytes_ = mapped->bytes();
  f->file_ = std::move(mapped);
  CASCADE_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(
    std::span<const uint8_t> bytes, const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->name_ = name;
  f->bytes_ = bytes;
  CASCADE_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

absl::Status SafetensorsFile::ParseAll() {
  auto bad = [&](const std::string& field, const std::string& problem) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": safetensors ", field, ": ", problem));
  };
  if (bytes_.size() < 8) return bad("header length", "file is shorter than 8 bytes");
  uint64_t header_len;
  std::memcpy(&header_len, bytes_.data(), 8);
  if (header_len > kMaxHeaderBytes) {
    return bad("header length",
               absl::StrCat(header_len, " bytes exceeds the limit of ", kMaxHeaderBytes));
  }
  if (header_len > bytes_.size() - 8) {
    return bad("header length", absl::StrCat(header_len, " bytes runs past the end of the file (",
                                             bytes_.size(), " bytes)"));
  }
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = bytes_.size() - data_start;
  const char* hp = reinterpret_cast<const char*>(bytes_.data() + 8);
  nlohmann::json header = nlohmann::json::parse(hp, hp + header_len, nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded()) return bad("header", "is not valid JSON");
  if (!header.is_object()) return bad("header", "is not a JSON object");

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& entry = it.value();
    if (key == "__metadata__") {
      if (!entry.is_object()) return bad("__metadata__", "is not an object");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string field = absl::StrCat("tensor '", key, "'");
    if (!entry.is_object()) return bad(field, "entry is not an object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) return bad(field, "dtype missing or not a string");
    if (sh == entry.end() || !sh->is_array()) return bad(field, "shape missing or not an array");
    if (off == entry.end() || !off->is_array() || off->size() != 2) {
      return bad(field, "data_offsets missing or not a pair");
    }
    SafetensorsTensor t;
    t.name = key;
    t.dtype = dt->get<std::string>();
    const DtypeInfo* info = FindDtype(t.dtype);
    if (!info) return bad(field, absl::StrCat("unknown dtype '", t.dtype, "'"));
    t.type = info->type;
    if (sh->size() > 8) return bad(field, absl::StrCat("shape has ", sh->size(), " dimensions"));
    uint64_t elems = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return bad(field, "shape entry is not a non-negative integer");
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t{1} << 40) || !CheckedMul(elems, v, &elems)) {
        return bad(field, "shape is absurdly large");
      }
      t.shape.push_back(static_cast<int64_t>(v));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      return bad(field, "data_offsets are not non-negative integers");
    }
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end)
      return bad(field,
                 absl::StrCat("data_offsets [", begin, ", ", end, ") end before they begin"));
    if (end > data_size) {
      return bad(field, absl::StrCat("data_offsets [", begin, ", ", end,
                                     ") run past the end of the data (", data_size,
                                     " bytes); the file may be truncated"));
    }
    uint64_t expect;
    if (!CheckedMul(elems, uint64_t{info->size}, &expect) || expect != end - begin) {
      return bad(field,
                 absl::StrCat("holds ", end - begin, " bytes but shape x dtype needs ", expect));
    }
    t.data = bytes_.data() + data_start + begin;
    t.nbytes = end - begin;
    ranges.emplace_back(begin, end);
    index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return bad("data_offsets", absl::StrCat("two tensors overlap at byte ", ranges[i].first));
    }
  }
  return absl::OkStatus();
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::vector<std::string>> ReadSafetensorsIndex(const std::string& index_path) {
  CASCADE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path, 64 << 20));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& problem) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": ", problem));
  };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return bad("'weight_map' missing or not an object");
  std::vector<std::string> shards;
  std::set<std::string> seen;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return bad(absl::StrCat("weight_map['", it.key(), "'] is not a file name"));
    }
    std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      return bad(absl::StrCat("shard name '", shard, "' is not a plain file name"));
    }
    if (seen.insert(shard).second) shards.push_back(shard);
  }
  if (shards.empty()) return bad("weight_map lists no shards");
  return shards;
}

}  // namespace cascade
