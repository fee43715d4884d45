// `cascade generate`: stream a completion of a prompt from a model in this process.
#include <cstdio>
#include <iostream>
#include <random>
#include <string>

#include "absl/strings/str_join.h"
#include "generation/sequence.h"
#include "tools/commands.h"
#include "tools/local_engine.h"
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
  std::string kv_type = "f32";
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
  auto device = ParseDevice(f.device);
  if (!device.ok()) {
    std::cerr << "cascade generate: --device: " << device.status().message() << "\n";
    return 2;
  }
  const std::optional<TensorType> kv_type = ParseKvCacheType(f.kv_type);
  if (!kv_type) {
    std::cerr << "cascade generate: --kv-type: '" << f.kv_type << "' is not f32 or f16\n";
    return 2;
  }
  StageOptions so;
  so.kv_type = *kv_type;
  so.threads = f.threads > 0 ? f.threads : DefaultThreads();
  so.quantized_activations = !f.exact;
  so.kv_sequences = 1;
  auto model = LoadModel(f.model, so, /*with_stage=*/false, *device);
  if (!model.ok()) {
    std::cerr << "cascade generate: " << model.status().message() << "\n";
    return 1;
  }
  const Tokenizer& tok = *model->tokenizer;
  const ModelConfig& config = model->source->config();
  auto prompt = tok.Encode(f.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (!prompt.ok()) {
    std::cerr << "cascade generate: " << prompt.status().message() << "\n";
    return 1;
  }
  SequenceRequest req;
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
  if (f.max_tokens == 0) {
    std::cout << (f.ids || f.no_echo ? "" : f.prompt) << "\n";
    return 0;
  }

  // The same path a cluster takes: the scheduler, over a pipeline of one stage that holds
  // every layer, in this process.
  LocalEngineOptions eo;
  eo.stage = so;
  eo.device = *device;
  eo.scheduler.prefill_chunk = so.max_batch_tokens;
  eo.scheduler.max_running = 1;
  eo.scheduler.max_waiting = 1;
  auto engine = LocalEngine::Create(*model->source, tok, eo);
  if (!engine.ok()) {
    std::cerr << "cascade generate: " << engine.status().message() << "\n";
    return 1;
  }
  spdlog::info("{}: {} ({} layers, dim {}, vocab {}), backend {}", f.model, config.arch,
               config.n_layers, config.dim, config.vocab_size,
               (*engine)->pipeline().executor(0).stage().backend().name());
  Scheduler* scheduler = &(*engine)->scheduler();
  auto stream = scheduler->Submit(std::move(req));
  if (!stream.ok()) {
    std::cerr << "cascade generate: " << stream.status().message() << "\n";
    return 1;
  }
  if (!f.ids && !f.no_echo) {
    std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
    std::fflush(stdout);
  }
  std::vector<int32_t> ids;
  StreamEvent last;
  for (;;) {
    std::optional<StreamEvent> e = (*stream)->Next(std::chrono::seconds(1));
    if (!e) continue;
    ids.insert(ids.end(), e->ids.begin(), e->ids.end());
    if (!f.ids && !e->text.empty()) {
      std::fwrite(e->text.data(), 1, e->text.size(), stdout);
      std::fflush(stdout);
    }
    if (e->last) {
      last = std::move(*e);
      break;
    }
  }
  engine->reset();
  if (!last.status.ok()) {
    std::cerr << "\ncascade generate: " << last.status.message() << "\n";
    return 1;
  }
  if (f.ids) {
    std::cout << absl::StrJoin(ids, " ") << "\n";
  } else {
    std::cout << "\n";
  }
  const StreamUsage& u = last.usage;
  const double prefill_s = u.time_to_first_token_s;
  const double decode_s = u.total_time_s - u.time_to_first_token_s;
  const double prefill_tps = u.prompt_tokens / std::max(prefill_s, 1e-9);
  const double decode_tps = u.completion_tokens > 1 ? (u.completion_tokens - 1) / std::max(decode_s, 1e-9) : 0.0;
  spdlog::info(
      "finish: {}; prefill {} tokens in {:.3f}s ({:.1f} tok/s); decode {} tokens in "
      "{:.3f}s ({:.1f} tok/s)",
      FinishReasonName(last.finish), u.prompt_tokens, prefill_s, prefill_tps,
      u.completion_tokens, decode_s, decode_tps);
  return 0;
}

}  // namespace

void AddGenerate(CLI::App& app, Action* action) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (in this process)");
  cmd->add_option("--model,-m", f->model, "GGUF file or Hugging Face folder");
  cmd->add_option("--server", f->server, "Generate on a running cluster (coordinator address)");
  cmd->add_option("--prompt,-p", f->prompt, "Prompt text (BOS is added as the model asks)");
  cmd->add_option("--max-tokens,-n", f->max_tokens, "Tokens to generate (0: none)")
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
  cmd->add_option("--kv-type", f->kv_type,
                  "KV cache elements: f32, or f16 (half the memory; keys and values rounded)");
  cmd->add_option("--threads", f->threads, "Compute threads (default: all cores)");
  cmd->add_option("--device", f->device, "auto (GPU if usable, else CPU), cpu, cuda or cuda:N");
  cmd->callback([f, action] { *action = [f] { return RunGenerate(*f); }; });
}

}  // namespace cascade::cli
