// `cascade generate`: stream a completion of a prompt from a model in this process.
#include <cstdio>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/str_join.h"
#include "engine/generator.h"
#include "tools/commands.h"
#include "tools/model_loader.h"
#include "util/logging.h"

namespace cascade::cli {
namespace {

struct GenerateFlags {
  std::string model;
  std::string prompt;
  int max_tokens = 256;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int64_t seed = -1;
  bool ids = false;
  bool no_echo = false;
  bool exact = false;
  int threads = 0;
  std::string device = "auto";
  std::vector<std::string> stop;
  std::string server;
};

int RunGenerate(const GenerateFlags& f) {
  if (!f.server.empty()) {
    v1::SamplingParams s;
    s.set_temperature(f.temperature);
    s.set_top_k(f.top_k);
    s.set_top_p(f.top_p);
    s.set_min_p(f.min_p);
    s.set_repetition_penalty(f.repeat_penalty);
    s.set_frequency_penalty(f.frequency_penalty);
    s.set_presence_penalty(f.presence_penalty);
    if (f.seed >= 0) {
      s.set_seed(static_cast<uint64_t>(f.seed));
      s.set_has_seed(true);
    }
    return RunRemoteGenerate(f.server, f.prompt, f.max_tokens, s, f.stop, f.ids, !f.no_echo);
  }
  if (f.model.empty()) {
    std::cerr << "cascade generate: give --model (run here) or --server (a running cluster)\n";
    return 2;
  }
  StageOptions so;
  so.threads = f.threads > 0 ? f.threads : DefaultThreads();
  so.quantized_activations = !f.exact;
  auto model = LoadModel(f.model, so, true, f.device);
  if (!model.ok()) {
    std::cerr << "cascade generate: " << model.status().message() << "\n";
    return 1;
  }
  const Tokenizer& tok = *model->tokenizer;
  auto prompt = tok.Encode(f.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (!prompt.ok()) {
    std::cerr << "cascade generate: " << prompt.status().message() << "\n";
    return 1;
  }
  GenerationRequest req;
  req.prompt = *prompt;
  req.max_tokens = f.max_tokens;
  req.stop = f.stop;
  req.sampling.temperature = f.temperature;
  req.sampling.top_k = f.top_k;
  req.sampling.top_p = f.top_p;
  req.sampling.min_p = f.min_p;
  req.sampling.repetition_penalty = f.repeat_penalty;
  req.sampling.frequency_penalty = f.frequency_penalty;
  req.sampling.presence_penalty = f.presence_penalty;
  req.sampling.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed) : std::random_device{}();
  spdlog::info("prompt: {} tokens; sampling: {}", req.prompt.size(), req.sampling.DebugString());

  if (!f.ids && !f.no_echo) {
    std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
    std::fflush(stdout);
  }
  auto on_token = [&](int32_t, const std::string& text) {
    if (!f.ids && !text.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  auto result = Generate(*model->stage, tok, req, on_token);
  if (!result.ok()) {
    std::cerr << "\ncascade generate: " << result.status().message() << "\n";
    return 1;
  }
  if (f.ids) {
    std::cout << absl::StrJoin(result->tokens, " ") << "\n";
  } else {
    std::cout << "\n";
  }
  const double prefill_tps = req.prompt.size() / std::max(result->prefill_seconds, 1e-9);
  const double decode_tps = result->tokens.size() > 1 ? (result->tokens.size() - 1) /
                                                            std::max(result->decode_seconds, 1e-9)
                                                      : 0.0;
  spdlog::info(
      "finish: {}; prefill {} tokens in {:.3f}s ({:.1f} tok/s); decode {} tokens in "
      "{:.3f}s ({:.1f} tok/s)",
      FinishReasonName(result->finish), req.prompt.size(), result->prefill_seconds, prefill_tps,
      result->tokens.size(), result->decode_seconds, decode_tps);
  return 0;
}

}  // namespace

void AddGenerate(CLI::App& app, Action* action) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (in this process)");
  cmd->add_option("--model,-m", f->model, "GGUF file or Hugging Face folder");
  cmd->add_option("--server", f->server, "Generate on a running cluster (coordinator address)");
  cmd->add_option("--prompt,-p", f->prompt, "Prompt text (BOS is added as the model asks)");
  cmd->add_option("--max-tokens,-n", f->max_tokens, "Tokens to generate")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--temperature,-t", f->temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", f->top_k, "0 = off")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", f->top_p, "1 = off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", f->min_p, "0 = off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", f->repeat_penalty, "1 = off");
  cmd->add_option("--frequency-penalty", f->frequency_penalty);
  cmd->add_option("--presence-penalty", f->presence_penalty);
  cmd->add_option("--seed,-s", f->seed, "Random seed (default: random, logged)");
  cmd->add_option("--stop", f->stop, "Stop string (repeatable)");
  cmd->add_flag("--ids", f->ids, "Print the generated token ids instead of text");
  cmd->add_flag("--no-echo", f->no_echo, "Do not print the prompt before the completion");
  cmd->add_flag("--exact", f->exact,
                "Compute quantized weights in F32 instead of quantizing activations");
  cmd->add_option("--threads", f->threads, "Compute threads (default: all cores)");
  cmd->add_option("--device", f->device, "auto (GPU if usable, else CPU), cpu, cuda or cuda:N");
  cmd->callback([f, action] { *action = [f] { return RunGenerate(*f); }; });
}

}  // namespace cascade::cli
