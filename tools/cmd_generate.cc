// `cascade generate`: stream a completion of a prompt from a model in this process.
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_join.h"
#include "serving/generate_spec.h"
#include "serving/proto_request.h"
#include "serving/sequence.h"
#include "tools/commands.h"
#include "local/local_engine.h"
#include "tools/model_loader.h"
#include "util/logging.h"

namespace cascade::cli {
namespace {

struct GenerateFlags {
  std::string model;
  std::string prompt;
  int max_tokens = 256;
  SamplingParams sampling;  // the flags' defaults are SamplingParams{}'s
  int64_t seed = -1;
  bool ids = false;
  bool no_echo = false;
  bool exact = false;
  std::string kv_type = "f32";
  int threads = 0;
  std::string device = "auto";
  std::vector<std::string> stop;
  std::string server;
  // auto: off here, the server's choice with --server; off: none (a server's too); ngram;
  // draft (with draft_model).
  std::string speculative = "auto";
  int spec_tokens = SchedulerConfig().spec_tokens;
  std::string draft_model;
  int draft_threads = DraftModelOptions().threads;
};

// The request the flags describe, in the serving core's model.
GenerateSpec SpecOf(const GenerateFlags& f) {
  GenerateSpec spec;
  spec.prompts.push_back({f.prompt, {}});
  spec.sampling = f.sampling;
  if (f.seed >= 0) spec.seed = static_cast<uint64_t>(f.seed);
  spec.max_tokens = f.max_tokens;
  spec.stop = f.stop;
  // On a server, "--speculative off" opts this request out of the server's speculation.
  spec.speculate = f.speculative != "off";
  return spec;
}

// Streams the request's events to stdout (text, or ids at the end); the last event.
StreamEvent PrintStream(RequestStream& stream, bool ids_only) {
  std::vector<int32_t> ids;
  for (;;) {
    std::optional<StreamEvent> e = stream.Next(std::chrono::seconds(1));
    if (!e) continue;
    ids.insert(ids.end(), e->ids.begin(), e->ids.end());
    if (!ids_only && !e->text.empty()) {
      std::fwrite(e->text.data(), 1, e->text.size(), stdout);
      std::fflush(stdout);
    }
    if (e->last) {
      std::cout << (ids_only ? absl::StrJoin(ids, " ") : "") << "\n";
      return std::move(*e);
    }
  }
}

void LogRates(const StreamEvent& last) {
  const StreamUsage& u = last.usage;
  const double prefill_s = u.time_to_first_token_s;
  const double decode_s = u.total_time_s - u.time_to_first_token_s;
  const double prefill_tps = u.prompt_tokens / std::max(prefill_s, 1e-9);
  const double decode_tps =
      u.completion_tokens > 1 ? (u.completion_tokens - 1) / std::max(decode_s, 1e-9) : 0.0;
  spdlog::info(
      "finish: {}; prefill {} tokens in {:.3f}s ({:.1f} tok/s); decode {} tokens in "
      "{:.3f}s ({:.1f} tok/s)",
      FinishReasonName(last.finish), u.prompt_tokens, prefill_s, prefill_tps,
      u.completion_tokens, decode_s, decode_tps);
}

int RunGenerate(const GenerateFlags& f) {
  if ((f.speculative == "draft") != !f.draft_model.empty()) {
    std::cerr << "cascade generate: --speculative draft and --draft-model PATH go together\n";
    return 2;
  }
  if (!f.server.empty() && f.speculative == "draft") {
    std::cerr << "cascade generate: with --server the server drafts (cascade serve "
                 "--speculative draft --draft-model PATH)\n";
    return 2;
  }
  if (!f.server.empty()) {
    v1::GenerateRequest req;
    SpecToProto(SpecOf(f), &req);
    return RunRemoteGenerate(f.server, req, f.ids, !f.no_echo);
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
  auto expanded = ExpandSpec(SpecOf(f), tok);
  if (!expanded.ok()) {
    std::cerr << "cascade generate: " << expanded.status().message() << "\n";
    return 1;
  }
  SequenceRequest req = std::move(expanded->front().request);
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
  eo.scheduler.speculative = f.speculative == "auto" ? Speculative::kOff
                                                     : *SpeculativeFromName(f.speculative);
  eo.scheduler.spec_tokens = f.spec_tokens;
  std::unique_ptr<DraftModel> draft;
  if (eo.scheduler.speculative == Speculative::kDraft) {
    DraftModelOptions dopt;
    dopt.threads = f.draft_threads;
    dopt.sequences = 1;
    auto d = DraftModel::Open(f.draft_model, tok, dopt);
    if (!d.ok()) {
      std::cerr << "cascade generate: " << d.status().message() << "\n";
      return 1;
    }
    draft = std::move(*d);
    eo.draft = draft.get();
  }
  auto engine = LocalEngine::Create(*model->source, tok, eo);
  if (!engine.ok()) {
    std::cerr << "cascade generate: " << engine.status().message() << "\n";
    return 1;
  }
  spdlog::info("{}: {} ({} layers, dim {}, vocab {}), backend {}", f.model, config.arch,
               config.n_layers, config.dim, config.vocab_size,
               (*engine)->pipeline().executor(0).stage().backend().name());
  auto stream = (*engine)->scheduler().Submit(std::move(req));
  if (!stream.ok()) {
    std::cerr << "cascade generate: " << stream.status().message() << "\n";
    return 1;
  }
  if (!f.ids && !f.no_echo) {
    std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
    std::fflush(stdout);
  }
  const StreamEvent last = PrintStream(**stream, f.ids);
  const SchedulerStats stats = (*engine)->scheduler().Stats();
  engine->reset();
  if (stats.spec_draft_tokens > 0) {
    spdlog::info("speculative: {} of {} drafted tokens accepted ({:.0f}%)",
                 stats.spec_accepted_tokens, stats.spec_draft_tokens,
                 100.0 * static_cast<double>(stats.spec_accepted_tokens) /
                     static_cast<double>(stats.spec_draft_tokens));
  }
  if (!last.status.ok()) {
    std::cerr << "cascade generate: " << last.status.message() << "\n";
    return 1;
  }
  LogRates(last);
  return 0;
}

}  // namespace

void AddGenerate(CLI::App& app, Action* action) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (in this process)");
  cmd->add_option("--model,-m", f->model, "GGUF file or Hugging Face folder");
  cmd->add_option("--server", f->server,
                  "Generate on a running cluster: the coordinator's public address (its "
                  "--listen, e.g. 127.0.0.1:50051), or every coordinator's, comma-separated: "
                  "the stream resumes on the leader when its coordinator is lost");
  cmd->add_option("--prompt,-p", f->prompt, "Prompt text (BOS is added as the model asks)");
  cmd->add_option("--max-tokens,-n", f->max_tokens, "Tokens to generate (0: none)")
      ->check(CLI::Range(0, 1 << 24));
  SamplingParams& s = f->sampling;
  cmd->add_option("--temperature,-t", s.temperature, "0 = greedy")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  cmd->add_option("--top-k", s.top_k, "0 = off")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--top-p", s.top_p, "1 = off")->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--min-p", s.min_p, "0 = off")->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--repeat-penalty", s.repetition_penalty, "1 = off")->capture_default_str();
  cmd->add_option("--frequency-penalty", s.frequency_penalty)->capture_default_str();
  cmd->add_option("--presence-penalty", s.presence_penalty)->capture_default_str();
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
  cmd->add_option("--speculative", f->speculative,
                  "auto, off, ngram or draft: ngram decodes speculatively with drafts from the "
                  "text so far, draft with drafts from --draft-model (the same text; "
                  "--log-level info shows how many were accepted); "
                  "auto is off here and the server's choice with --server, where off opts "
                  "this request out")
      ->check(CLI::IsMember({"auto", "off", "ngram", "draft"}))
      ->capture_default_str();
  cmd->add_option("--spec-tokens", f->spec_tokens, "Drafted tokens per step, at most")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--draft-model", f->draft_model,
                  "With --speculative draft: a small model file with this model's vocabulary "
                  "that drafts the tokens");
  cmd->add_option("--draft-threads", f->draft_threads, "Compute threads of the draft model")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->callback([f, action] { *action = [f] { return RunGenerate(*f); }; });
}

}  // namespace cascade::cli
