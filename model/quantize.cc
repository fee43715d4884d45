#include "model/quantize.h"

#include "absl/strings/str_cat.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "tensor/quant.h"
#include "util/status_macros.h"

namespace cascade {

uint32_t FileTypeFor(TensorType type) {
  switch (type) {
    case TensorType::kF32:
      return 0;
    case TensorType::kF16:
      return 1;
    case TensorType::kQ4_0:
      return 2;
    case TensorType::kQ8_0:
      return 7;
    case TensorType::kQ4_1:
      return 3;
    case TensorType::kQ5_0:
      return 8;
    case TensorType::kQ5_1:
      return 9;
    case TensorType::kQ2_K:
      return 10;
    case TensorType::kQ3_K:
      return 11;  // Q3_K_S
    case TensorType::kQ4_K:
      return 14;  // Q4_K_S
    case TensorType::kQ5_K:
      return 16;  // Q5_K_S
    case TensorType::kQ6_K:
      return 18;
    case TensorType::kIQ4_NL:
      return 25;
    case TensorType::kIQ4_XS:
      return 30;
    case TensorType::kBF16:
      return 32;
    default:
      return 0;
  }
}

absl::Status QuantizeModel(const std::string& in_path, const std::string& out_path, TensorType type,
                           QuantizeReport* report) {
  if (!IsComputeSupported(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantize: target type ", TensorTypeName(type), " is not supported"));
  }
  CASCADE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> in, GgufFile::Open(in_path));
  GgufWriter w;
  for (const auto& [key, value] : in->metadata()) {
    if (key == "general.file_type" || key == "general.alignment") continue;
    w.SetValue(key, value);
  }
  w.SetUint32("general.file_type", FileTypeFor(type));
  w.SetUint32("general.quantization_version", 2);
  for (const GgufTensorInfo& t : in->tensors()) {
    report->bytes_in += t.nbytes;
    std::vector<int64_t> ne(t.ne, t.ne + t.n_dims);
    const bool matrix =
        t.n_dims == 2 && (t.name.rfind("blk.", 0) == 0 || t.name == "token_embd.weight" ||
                          t.name == "output.weight");
    if (!matrix) {
      w.AddTensor(t.name, t.type, ne, std::span<const uint8_t>(t.data, t.nbytes));
      report->bytes_out += t.nbytes;
      continue;
    }
    if (!IsComputeSupported(t.type)) {
      return absl::UnimplementedError(absl::StrCat(in_path, ": tensor '", t.name, "' has type ",
                                                   TensorTypeName(t.type),
                                                   ", which cannot be dequantized"));
    }
    TensorType target = type;
    const uint64_t cols = static_cast<uint64_t>(t.ne[0]);
    if (cols % Traits(target).block_elems != 0) {
      // IQ4_XS falls back to IQ4_NL (its 32-element blocks, the same levels), as
      // llama.cpp's mixes do; other types to Q8_0.
      const TensorType near =
          type == TensorType::kIQ4_XS ? TensorType::kIQ4_NL : TensorType::kQ8_0;
      target = cols % Traits(near).block_elems == 0 ? near : TensorType::kF16;
      ++report->fallbacks;
      report->notes.push_back(absl::StrCat(t.name, ": rows of ", cols, " are not a multiple of ",
                                           Traits(type).block_elems, "; stored as ",
                                           TensorTypeName(target)));
    }
    ++report->matrices;
    uint64_t out_row = 0, in_row = 0;
    if (!RowBytes(target, cols, &out_row) || !RowBytes(t.type, cols, &in_row)) {
      return absl::InvalidArgumentError(absl::StrCat(in_path, ": tensor '", t.name, "' bad shape"));
    }
    const uint64_t rows = t.nbytes / in_row;
    report->bytes_out += out_row * rows;
    const uint8_t* src = t.data;
    const TensorType src_type = t.type;
    w.AddTensor(
        t.name, target, ne,
        [src, src_type, target, cols, rows, in_row, out_row](std::vector<uint8_t>* out) {
          out->resize(out_row * rows);
          std::vector<float> row(cols);
          for (uint64_t r = 0; r < rows; ++r) {
            DequantizeRow(src_type, src + r * in_row, static_cast<int64_t>(cols), row.data());
            QuantizeRow(target, row.data(), static_cast<int64_t>(cols), out->data() + r * out_row);
          }
          return absl::OkStatus();
        });
  }
  return w.WriteFile(out_path);
}

}  // namespace cascade
