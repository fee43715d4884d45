// `cascade make-model` (random-weight models of named shapes) and `cascade quantize`.
#include <sys/stat.h>

#include <iostream>

#include "absl/strings/str_join.h"
#include "model/gguf.h"
#include "model/quantize.h"
#include "model/synthetic.h"
#include "tools/commands.h"
#include "util/units.h"

namespace cascade::cli {
namespace {

struct MakeModelFlags {
  std::string shape, type = "F16", out, tokenizer;
  uint64_t seed = 1;
  bool no_tokenizer = false;
};

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// A real tokenizer from ../shared whose vocabulary matches the shape, if one is there.
std::string DefaultTokenizer(int64_t vocab) {
  const char* dir = std::getenv("CASCADE_SHARED_DIR");
  const std::string shared = dir ? dir : "../shared";
  const std::pair<int64_t, const char*> known[] = {
      {32000, "/testdata/tokenizer/ggml-vocab-llama-spm.gguf"},
      {49152, "/testdata/tokenizer/ggml-vocab-starcoder.gguf"},
  };
  for (const auto& [v, path] : known) {
    if (v == vocab && Exists(shared + path)) return shared + path;
  }
  return "";
}

int RunMakeModel(const MakeModelFlags& f) {
  auto shape = FindModelShape(f.shape);
  if (!shape) {
    std::cerr << "cascade make-model: unknown shape '" << f.shape
              << "' (known: " << absl::StrJoin(ModelShapeNames(), ", ") << ")\n";
    return 2;
  }
  auto type = ParseTensorTypeName(f.type);
  if (!type) {
    std::cerr << "cascade make-model: unknown type '" << f.type << "'\n";
    return 2;
  }
  SyntheticOptions o;
  o.type = *type;
  o.seed = f.seed;
  if (!f.no_tokenizer) {
    o.tokenizer_gguf = f.tokenizer.empty() ? DefaultTokenizer(shape->vocab) : f.tokenizer;
    if (o.tokenizer_gguf.empty()) {
      // A model without a tokenizer is one nothing can serve or generate with.
      std::cerr << "cascade make-model: no tokenizer with " << shape->vocab
                << " tokens was found (looked in $CASCADE_SHARED_DIR or ../shared/testdata/"
                   "tokenizer); pass --tokenizer FILE.gguf with a vocabulary of "
                << shape->vocab
                << " tokens, or --no-tokenizer for a weights-only file (kernel benchmarks)\n";
      return 2;
    }
  }
  absl::Status st = WriteSyntheticModel(*shape, o, f.out);
  if (!st.ok()) {
    std::cerr << "cascade make-model: " << st.message() << "\n";
    return 1;
  }
  std::cerr << "wrote " << f.out << " (" << shape->name << ", " << TensorTypeName(*type)
            << ", seed " << f.seed << ")\n";
  return 0;
}

struct QuantizeFlags {
  std::string in, out, type;
};

int RunQuantize(const QuantizeFlags& f) {
  auto type = ParseTensorTypeName(f.type);
  if (!type) {
    std::cerr << "cascade quantize: unknown type '" << f.type << "'\n";
    return 2;
  }
  QuantizeReport report;
  absl::Status st = QuantizeModel(f.in, f.out, *type, &report);
  if (!st.ok()) {
    std::cerr << "cascade quantize: " << st.message() << "\n";
    return 1;
  }
  for (const auto& note : report.notes) std::cerr << "  " << note << "\n";
  std::cerr << "wrote " << f.out << ": " << report.matrices << " matrices as "
            << TensorTypeName(*type) << " (" << report.fallbacks << " fell back), "
            << HumanBytes(report.bytes_in) << " -> " << HumanBytes(report.bytes_out) << "\n";
  return 0;
}

}  // namespace

void AddMakeModel(CLI::App& app, Action* action) {
  auto f = std::make_shared<MakeModelFlags>();
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a random-weight model of a named shape (for benchmarks)");
  cmd->add_option("--shape", f->shape, absl::StrJoin(ModelShapeNames(), ", "))->required();
  cmd->add_option("--type", f->type,
                  "F32, F16, BF16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                  "IQ4_NL, IQ4_XS");
  cmd->add_option("--seed", f->seed, "Random seed (same seed, same file)");
  cmd->add_option("--tokenizer", f->tokenizer,
                  "GGUF vocabulary to embed (default: a matching one from ../shared)");
  cmd->add_flag("--no-tokenizer", f->no_tokenizer,
                "Write weights only: no tokenizer (the file cannot be served; for kernel "
                "benchmarks)");
  cmd->add_option("out", f->out, "Output .gguf")->required();
  cmd->callback([f, action] { *action = [f] { return RunMakeModel(*f); }; });
}

void AddQuantize(CLI::App& app, Action* action) {
  auto f = std::make_shared<QuantizeFlags>();
  CLI::App* cmd = app.add_subcommand("quantize", "Rewrite a GGUF model with quantized matrices");
  cmd->add_option("in", f->in, "Input .gguf")->required();
  cmd->add_option("out", f->out, "Output .gguf")->required();
  cmd->add_option("--type", f->type,
                  "Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, Q6_K, Q5_K, Q4_K, Q3_K, Q2_K, IQ4_XS, IQ4_NL, F16, "
                  "BF16 or F32")
      ->required();
  cmd->callback([f, action] { *action = [f] { return RunQuantize(*f); }; });
}

}  // namespace cascade::cli
