// local_engine_probe: `cascade generate`'s path and nothing else, as its own program: the
// serving core's scheduler over an in-process pipeline (LocalEngine), greedy, on a model.
// It prints the generated ids, so that it is seen to work; tests/link_check.sh checks that
// this path carries no HTTP server, YAML or gRPC reflection code.
//
//   local_engine_probe MODEL N_TOKENS
#include <cstdio>
#include <cstdlib>
#include <string>

#include "local/local_engine.h"
#include "model/model_source.h"
#include "model/tokenizer.h"
#include "util/logging.h"

int main(int argc, char** argv) {
  using namespace cascade;
  if (argc != 3) {
    std::fprintf(stderr, "usage: local_engine_probe MODEL N_TOKENS\n");
    return 2;
  }
  // Logs on stderr, warnings only: stdout carries the token ids alone.
  if (!InitLogging("warn").ok()) return 2;
  auto source = ModelSource::Open(argv[1]);
  if (!source.ok()) {
    std::fprintf(stderr, "%s\n", std::string(source.status().message()).c_str());
    return 1;
  }
  auto tokenizer = Tokenizer::FromSource(**source);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  LocalEngineOptions options;
  options.stage.threads = 1;
  auto engine = LocalEngine::Create(**source, **tokenizer, options);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  SequenceRequest req;
  req.prompt = {(*tokenizer)->bos_id()};
  req.sampling = SamplingParams::Greedy();
  req.max_tokens = std::atoi(argv[2]);
  req.ignore_eos = true;
  auto stream = (*engine)->scheduler().Submit(std::move(req));
  if (!stream.ok()) {
    std::fprintf(stderr, "%s\n", std::string(stream.status().message()).c_str());
    return 1;
  }
  for (;;) {
    std::optional<StreamEvent> e = (*stream)->Next(std::chrono::seconds(1));
    if (!e) continue;
    for (int32_t id : e->ids) std::printf("%d ", id);
    if (e->last) {
      std::printf("\n");
      return e->status.ok() ? 0 : 1;
    }
  }
}
