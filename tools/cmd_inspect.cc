// `cascade inspect`: what a model file holds and the memory it needs.
#include <cstdio>
#include <iostream>
#include <map>

#include "model/memory.h"
#include "model/tokenizer.h"
#include "tools/commands.h"

namespace cascade::cli {
namespace {

struct InspectFlags {
  std::string model;
  int64_t ctx = 0;
  int64_t batch = 512;
};

const char* RopeLayoutName(RopeLayout l) {
  return l == RopeLayout::kAdjacentPairs ? "adjacent pairs (GGUF llama)" : "halves (NeoX/HF)";
}

int RunInspect(const InspectFlags& f) {
  auto src = ModelSource::Open(f.model);
  if (!src.ok()) {
    std::cerr << "cascade inspect: " << src.status().message() << "\n";
    return 1;
  }
  const ModelConfig& c = (*src)->config();
  std::printf("model          %s (%s)\n", f.model.c_str(), std::string((*src)->format()).c_str());
  if (!c.name.empty()) std::printf("name           %s\n", c.name.c_str());
  std::printf("architecture   %s\n", c.arch.c_str());
  std::printf("parameters     %.2f M\n", c.ParameterCount() / 1e6);
  if (c.is_moe()) {
    std::printf("experts        %ld, %ld used per token (%.2f M parameters active)%s\n",
                static_cast<long>(c.n_experts), static_cast<long>(c.n_experts_used),
                c.ActiveParameterCount() / 1e6,
                c.shared_expert_ffn_dim > 0 ? ", plus a shared expert" : "");
  }
  std::printf("vocab          %ld\n", static_cast<long>(c.vocab_size));
  std::printf("hidden size    %ld\n", static_cast<long>(c.dim));
  std::printf("layers         %ld\n", static_cast<long>(c.n_layers));
  std::printf("heads          %ld (kv heads %ld, head dim %ld)\n", static_cast<long>(c.n_heads),
              static_cast<long>(c.n_kv_heads), static_cast<long>(c.head_dim));
  std::printf("ffn size       %ld\n", static_cast<long>(c.ffn_dim));
  std::printf("context        %ld\n", static_cast<long>(c.context_length));
  std::printf("rope           theta %g, %ld dims, %s%s\n", c.rope_theta,
              static_cast<long>(c.rope_dim), RopeLayoutName(c.rope_layout),
              c.rope_scaling.type == RopeScalingType::kLlama3   ? ", llama3 scaling"
              : c.rope_scaling.type == RopeScalingType::kLinear ? ", linear scaling"
              : !c.rope_freq_factors.empty()                    ? ", frequency factors"
                                                                : "");
  std::printf("norm eps       %g\n", c.norm_eps);
  std::printf("embeddings     %s\n", c.tied_embeddings ? "tied" : "separate output head");
  std::printf("qkv bias       %s\n", c.qkv_bias ? "yes" : "no");

  auto tok = Tokenizer::FromSource(**src);
  if (tok.ok()) {
    std::printf("tokenizer      %s, %d tokens, bos %d, eos %d\n", (*tok)->Describe().c_str(),
                (*tok)->vocab_size(), (*tok)->bos_id(), (*tok)->eos_id());
  } else {
    std::printf("tokenizer      unavailable: %s\n", std::string(tok.status().message()).c_str());
  }

  struct TypeStats {
    int count = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, TypeStats> by_type;
  for (const TensorView& t : (*src)->tensors()) {
    auto& s = by_type[TensorTypeName(t.type)];
    ++s.count;
    s.bytes += t.nbytes;
  }
  std::printf("\ntensors by type\n");
  for (const auto& [name, s] : by_type) {
    std::printf("  %-6s %5d tensors %12s\n", name.c_str(), s.count, HumanBytes(s.bytes).c_str());
  }
  const int64_t ctx = f.ctx > 0 ? f.ctx : c.context_length;
  const LayerRange all{0, static_cast<int>(c.n_layers)};
  const StageMemory m =
      EstimateStageMemory(c, all, StageWeightBytes(**src, all), ctx, std::min(f.batch, ctx));
  std::printf("\nmemory for one sequence of %ld tokens, batches of %ld tokens\n",
              static_cast<long>(ctx), static_cast<long>(std::min(f.batch, ctx)));
  std::printf("  weights      %12s\n", HumanBytes(m.weights).c_str());
  if (c.is_moe()) {
    std::printf("    (all experts resident; a token reads %s of them)\n",
                HumanBytes(StageActiveWeightBytes(**src, all)).c_str());
  }
  std::printf(
      "  KV cache     %12s  (F32, %s per token; F16: %s)\n", HumanBytes(m.kv_cache).c_str(),
      HumanBytes(KvBytesPerToken(c, static_cast<int>(c.n_layers), TensorType::kF32)).c_str(),
      HumanBytes(KvBytesPerToken(c, static_cast<int>(c.n_layers), TensorType::kF16)).c_str());
  std::printf("  activations  %12s\n", HumanBytes(m.activations).c_str());
  std::printf("  total        %12s\n", HumanBytes(m.total()).c_str());
  return 0;
}

}  // namespace

void AddInspect(CLI::App& app, Action* action) {
  auto f = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model and the memory it needs");
  cmd->add_option("--model,-m", f->model, "GGUF file or Hugging Face folder")->required();
  cmd->add_option("--ctx", f->ctx,
                  "Context (tokens) to size the KV cache for (default: the model's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--batch", f->batch, "Tokens per forward pass to size activations for")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->callback([f, action] { *action = [f] { return RunInspect(*f); }; });
}

}  // namespace cascade::cli
