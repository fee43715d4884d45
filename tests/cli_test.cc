// End-to-end tests of the `cascade` command-line tool, run as a separate process the way
// users and other tools call it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_util.h"
#include "nlohmann/json.hpp"
#include "tests/subprocess.h"
#include "util/npy.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct RunResult {
  int exit_code = -1;
  std::string out;
};

// Runs a shell command line; stdout is captured, stderr passes through to the test log.
RunResult RunCmd(const std::string& cmd) {
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string Bin() { return CASCADE_BIN; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

TEST(Cli, GreedyStoryFromBosMatchesReference) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  RunResult r = RunCmd(Bin() + " generate --model " + model +
                       " --prompt '' --temperature 0 --max-tokens 256 --threads 1");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(Trim(r.out), Trim(ReadText(testing::SharedPath("models/stories260K/greedy.txt"))));
}

TEST(Cli, IdsFlagPrintsReferenceIds) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  RunResult r = RunCmd(Bin() + " generate --model " + model +
                       " --prompt 'Once upon a time' --temperature 0 --max-tokens 200 --ids");
  ASSERT_EQ(r.exit_code, 0);
  std::string want = Trim(ReadText(testing::SharedPath("models/stories260K/prompt-greedy.ids")));
  want = want.substr(std::string("1 403 407 261 378 ").size());  // generated part only
  EXPECT_EQ(Trim(r.out), want);
}

TEST(Cli, BundledModelTellsTheReferenceStory) {
  // The README's main command, on the model shipped in the repository.
  const std::string bundled = std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf";
  RunResult r = RunCmd(Bin() + " generate --model " + bundled +
                       " --prompt 'Once upon a time' --temperature 0 --max-tokens 200");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, ::testing::StartsWith("Once upon a time"));
  EXPECT_GT(r.out.size(), 400u);
  const std::string ref = testing::SharedPath("models/stories260K/prompt-greedy.txt");
  if (testing::PathExists(ref)) {
    EXPECT_EQ(Trim(r.out), Trim(ReadText(ref)));
  }
}

TEST(Cli, SameSeedSameTextAcrossRuns) {
  const std::string bundled = std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf";
  const std::string cmd = Bin() + " generate --model " + bundled +
                          " --prompt 'Once upon a time' --temperature 1.0 --seed 7 --max-tokens 60";
  RunResult a = RunCmd(cmd);
  RunResult b = RunCmd(cmd);
  RunResult c = RunCmd(Bin() + " generate --model " + bundled +
                       " --prompt 'Once upon a time' --temperature 1.0 --seed 8 --max-tokens 60");
  ASSERT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

// --speculative ngram: the same text, seeded and greedy, and the acceptance at info.
TEST(Cli, SpeculativeGenerateGivesTheSameTextAndLogsTheAcceptance) {
  const std::string bundled = std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf";
  const std::string base = Bin() + " generate --model " + bundled +
                           " --prompt 'Lily had a red ball. Lily had a red ball. Lily had'"
                           " --max-tokens 60";
  for (const char* sampling : {" --temperature 0", " --temperature 0.8 --seed 5"}) {
    RunResult plain = RunCmd(base + sampling);
    RunResult spec = RunCmd(base + sampling + " --speculative ngram");
    ASSERT_EQ(plain.exit_code, 0) << plain.out;
    ASSERT_EQ(spec.exit_code, 0) << spec.out;
    EXPECT_EQ(spec.out, plain.out) << sampling;
  }
  RunResult logged = RunCmd(base + " --temperature 0 --speculative ngram --log-level info 2>&1");
  EXPECT_THAT(logged.out, ::testing::ContainsRegex("speculative: [0-9]+ of [0-9]+ drafted tokens "
                                                   "accepted"));
  RunResult bad = RunCmd(base + " --speculative maybe 2>&1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.out, HasSubstr("--speculative"));
}

// --speculative draft: a draft model (here the model itself) gives the same text; a draft
// model of another vocabulary, or one flag without the other, is refused by name.
TEST(Cli, DraftModelSpeculationGivesTheSameTextAndRefusesAnotherVocabulary) {
  const std::string bundled = std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf";
  const std::string base = Bin() + " generate --model " + bundled +
                           " --prompt 'Once upon a time' --max-tokens 60";
  for (const char* sampling : {" --temperature 0", " --temperature 0.8 --seed 5"}) {
    RunResult plain = RunCmd(base + sampling);
    RunResult spec = RunCmd(base + sampling + " --speculative draft --draft-model " + bundled +
                            " --log-level info 2>/tmp/cascade_draft_cli.log");
    ASSERT_EQ(plain.exit_code, 0) << plain.out;
    ASSERT_EQ(spec.exit_code, 0) << spec.out;
    EXPECT_EQ(spec.out, plain.out) << sampling;
  }
  EXPECT_THAT(ReadText("/tmp/cascade_draft_cli.log"),
              ::testing::ContainsRegex("speculative: [0-9]+ of [0-9]+ drafted tokens accepted"));
  const std::string other = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  if (testing::PathExists(other)) {
    RunResult bad = RunCmd(base + " --speculative draft --draft-model " + other + " 2>&1");
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_THAT(bad.out, HasSubstr("must share the model's vocabulary"));
  }
  RunResult alone = RunCmd(base + " --speculative draft 2>&1");
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_THAT(alone.out, HasSubstr("--draft-model"));
  RunResult served = RunCmd(Bin() + " serve --model " + bundled +
                            " --speculative draft --listen 127.0.0.1:0 2>&1");
  EXPECT_NE(served.exit_code, 0);
  EXPECT_THAT(served.out, HasSubstr("--speculative draft needs --draft-model PATH"));
}

TEST(Cli, TokenizeDetokenizeRoundTripGgufAndHf) {
  const std::string gguf = testing::SharedPath("models/stories260K/stories260K.gguf");
  const std::string hf = testing::SharedPath("models/stories260K/hf");
  CASCADE_REQUIRE_SHARED(hf);
  RunResult a = RunCmd("printf 'Once upon a time' | " + Bin() + " tokenize --model " + gguf);
  RunResult b = RunCmd("printf 'Once upon a time' | " + Bin() + " tokenize --model " + hf);
  ASSERT_EQ(a.exit_code, 0);
  EXPECT_EQ(Trim(a.out), Trim(ReadText(testing::SharedPath("models/stories260K/prompt.ids"))));
  EXPECT_EQ(a.out, b.out);
  RunResult nobos =
      RunCmd("printf 'Once upon a time' | " + Bin() + " tokenize --no-bos --model " + gguf);
  EXPECT_EQ(Trim(nobos.out), "403 407 261 378");
  RunResult d = RunCmd("echo '" + Trim(a.out) + "' | " + Bin() + " detokenize --model " + hf);
  ASSERT_EQ(d.exit_code, 0);
  EXPECT_EQ(d.out, "Once upon a time");
}

TEST(Cli, LogitsWritesReferenceLogits) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  const std::string out = ::testing::TempDir() + "/cli_logits.npy";
  RunResult r =
      RunCmd(Bin() + " logits --model " + model + " --ids '1 403 407 261 378' --out " + out);
  ASSERT_EQ(r.exit_code, 0);
  auto got = ReadNpyF32(out);
  auto ref = ReadNpyF32(testing::SharedPath("models/stories260K/prompt-greedy.logits.npy"));
  ASSERT_TRUE(got.ok() && ref.ok());
  ASSERT_EQ(got->shape, (std::vector<int64_t>{5, 512}));
  for (size_t i = 0; i < got->data.size(); ++i) {
    ASSERT_NEAR(got->data[i], ref->data[i], 1e-4) << i;
  }
}

TEST(Cli, InspectDescribesModelAndMemory) {
  const std::string bundled = std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf";
  RunResult r = RunCmd(Bin() + " inspect --model " + bundled + " --ctx 512");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("architecture   llama"));
  EXPECT_THAT(r.out, HasSubstr("heads          8 (kv heads 4, head dim 8)"));
  EXPECT_THAT(r.out, HasSubstr("F32"));
  // KV cache: 2 (k, v) x 5 layers x 32 kv dims x 4 bytes x 512 tokens = 640 KiB
  EXPECT_THAT(r.out, HasSubstr("KV cache       640.00 KiB"));
}

TEST(Cli, BadInputGivesClearErrors) {
  RunResult r = RunCmd(Bin() + " generate --model /nonexistent.gguf --prompt x 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("/nonexistent.gguf"));
  const std::string bundled = std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf";
  r = RunCmd("echo '1 2 99999' | " + Bin() + " detokenize --model " + bundled + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("'99999' is not a token id"));
  r = RunCmd(Bin() + " logits --model " + bundled + " --ids '1 x' --out /tmp/x.npy 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("'x' in --ids is not an integer"));
}

// `cascade generate` applies the APIs' max_tokens rule: more than the context leaves after
// the prompt is refused, naming the three numbers, not cut short.
TEST(Cli, MaxTokensBeyondTheContextIsRefused) {
  const std::string bundled = std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf";
  RunResult r = RunCmd(Bin() + " generate --model " + bundled +
                       " --prompt 'Once upon a time' --max-tokens 600 2>&1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("max_tokens 600 plus the prompt's 5 tokens exceeds the model's "
                               "context of 512 tokens"));
}

// ---------------------------------------------------------------- make-model, quantize

std::string TmpPath(const std::string& name) {
  return ::testing::TempDir() + "/cascade_cli_" + std::to_string(::getpid()) + "_" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Bundled() { return std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf"; }

std::vector<long> ParseIds(const std::string& text) {
  std::vector<long> ids;
  std::istringstream in(text);
  long v;
  while (in >> v) ids.push_back(v);
  return ids;
}

double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return m;
}

// Without a tokenizer it could embed, make-model writes nothing (such a file could not be
// served), unless asked for weights only.
TEST(Cli, MakeModelRefusesAModelWithoutATokenizer) {
  const std::string out = TmpPath("notok.gguf");
  RunResult r = RunCmd("CASCADE_SHARED_DIR=/nonexistent " + Bin() +
                       " make-model --shape tiny " + out + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.out, HasSubstr("no tokenizer with 512 tokens"));
  EXPECT_THAT(r.out, HasSubstr("--tokenizer"));
  EXPECT_TRUE(ReadBytes(out).empty()) << "nothing is written";
  r = RunCmd(Bin() + " make-model --shape tiny --no-tokenizer " + out + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(ReadBytes(out).empty());
}

// The smallest named shape, "tiny" (model/synthetic.cc: llama, vocab 512, dim 64, 2 layers,
// 4 heads / 2 KV heads, FFN 256), with the bundled model's 512-token vocabulary.
TEST(Cli, MakeModelWritesAGgufThatInspectReadsAndGenerateRuns) {
  const std::string out = TmpPath("tiny.gguf"), again = TmpPath("tiny2.gguf"),
                    other = TmpPath("tiny3.gguf");
  const std::string make =
      Bin() + " make-model --shape tiny --type Q8_0 --tokenizer " + Bundled() + " ";
  ASSERT_EQ(RunCmd(make + "--seed 1 " + out + " 2>&1").exit_code, 0);
  ASSERT_EQ(RunCmd(make + "--seed 1 " + again + " 2>&1").exit_code, 0);
  ASSERT_EQ(RunCmd(make + "--seed 2 " + other + " 2>&1").exit_code, 0);
  EXPECT_EQ(ReadBytes(out), ReadBytes(again)) << "same seed, same file";
  EXPECT_NE(ReadBytes(out), ReadBytes(other)) << "another seed, other weights";

  RunResult r = RunCmd(Bin() + " inspect --model " + out);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("architecture   llama"));
  EXPECT_THAT(r.out, HasSubstr("vocab          512"));
  EXPECT_THAT(r.out, HasSubstr("hidden size    64"));
  EXPECT_THAT(r.out, HasSubstr("layers         2"));
  EXPECT_THAT(r.out, HasSubstr("heads          4 (kv heads 2, head dim 16)"));
  EXPECT_THAT(r.out, HasSubstr("ffn size       256"));
  EXPECT_THAT(r.out, HasSubstr("tokenizer      spm, 512 tokens"));
  // 16 matrices (token_embd, output, 7 per layer) as Q8_0: 34 bytes per 32 weights; 5 F32
  // norms (2 per layer, output_norm) of 64.
  const int64_t matrix_weights = 2 * 512 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 256);
  char q8[64], f32[64];
  std::snprintf(q8, sizeof(q8), "Q8_0      16 tensors   %.2f KiB",
                matrix_weights / 32 * 34 / 1024.0);
  std::snprintf(f32, sizeof(f32), "F32        5 tensors     %.2f KiB", 5 * 64 * 4 / 1024.0);
  EXPECT_THAT(r.out, HasSubstr(q8));
  EXPECT_THAT(r.out, HasSubstr(f32));

  // Greedy generation on it, checked against `cascade logits` on the same file: each
  // generated id is the argmax of the teacher-forced logits before it, and generation
  // stops early only where the argmax is EOS (2).
  RunResult tok = RunCmd("printf 'Once upon a time' | " + Bin() + " tokenize --model " + out);
  ASSERT_EQ(tok.exit_code, 0);
  const auto prompt = ParseIds(tok.out);
  ASSERT_EQ(prompt.size(), 5u) << tok.out;
  RunResult g = RunCmd(Bin() + " generate --model " + out +
                       " --prompt 'Once upon a time' --temperature 0 --max-tokens 8 --ids");
  ASSERT_EQ(g.exit_code, 0);
  const auto gen = ParseIds(g.out);
  ASSERT_LE(gen.size(), 8u);
  std::string all_ids;
  for (long id : prompt) all_ids += std::to_string(id) + " ";
  for (long id : gen) all_ids += std::to_string(id) + " ";
  const std::string npy = TmpPath("tiny.npy");
  ASSERT_EQ(
      RunCmd(Bin() + " logits --model " + out + " --ids '" + all_ids + "' --out " + npy + " 2>&1")
          .exit_code,
      0);
  auto logits = ReadNpyF32(npy);
  ASSERT_TRUE(logits.ok());
  const size_t rows = prompt.size() + gen.size();
  ASSERT_EQ(logits->shape, (std::vector<int64_t>{static_cast<int64_t>(rows), 512}));
  auto argmax = [&](size_t row) {
    const float* l = logits->data.data() + row * 512;
    return static_cast<long>(std::max_element(l, l + 512) - l);
  };
  for (float v : logits->data) ASSERT_TRUE(std::isfinite(v));
  for (size_t k = 0; k < gen.size(); ++k) {
    EXPECT_EQ(gen[k], argmax(prompt.size() - 1 + k)) << "generated id " << k;
  }
  if (gen.size() < 8) {
    EXPECT_EQ(argmax(rows - 1), 2) << "stopped early without EOS";
  }
  RunResult text = RunCmd(Bin() + " generate --model " + out +
                          " --prompt 'Once upon a time' --temperature 0 --max-tokens 8");
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.out, ::testing::StartsWith("Once upon a time"));
  std::remove(npy.c_str());
  for (const auto& f : {out, again, other}) std::remove(f.c_str());
}

// stories260K has rows of 64 (a multiple of 32) and 172 (not): Q8_0 applies to 31 of its
// 36 matrices, the 5 ffn_down fall back to F16, the 11 norms stay F32.
TEST(Cli, QuantizeToQ8_0KeepsTheLogitsClose) {
  const std::string out = TmpPath("q8.gguf");
  RunResult q = RunCmd(Bin() + " quantize " + Bundled() + " " + out + " --type Q8_0 2>&1");
  ASSERT_EQ(q.exit_code, 0) << q.out;
  EXPECT_THAT(q.out, HasSubstr("36 matrices as Q8_0 (5 fell back)"));
  EXPECT_THAT(q.out, HasSubstr("blk.4.ffn_down.weight: rows of 172 are not a multiple of 32"));
  RunResult info = RunCmd(Bin() + " inspect --model " + out);
  ASSERT_EQ(info.exit_code, 0);
  EXPECT_TRUE(std::regex_search(info.out, std::regex("Q8_0 +31 tensors"))) << info.out;
  EXPECT_TRUE(std::regex_search(info.out, std::regex("F16 +5 tensors"))) << info.out;
  EXPECT_TRUE(std::regex_search(info.out, std::regex("F32 +11 tensors"))) << info.out;
  EXPECT_LT(ReadBytes(out).size(), ReadBytes(Bundled()).size() / 2);

  const std::string f32_npy = TmpPath("f32.npy"), q8_npy = TmpPath("q8.npy"),
                    exact_npy = TmpPath("q8exact.npy");
  ASSERT_EQ(RunCmd(Bin() + " logits --model " + Bundled() + " --ids '1 403 407 261 378' --out " +
                   f32_npy + " 2>&1")
                .exit_code,
            0);
  ASSERT_EQ(RunCmd(Bin() + " logits --model " + out + " --ids '1 403 407 261 378' --out " + q8_npy +
                   " 2>&1")
                .exit_code,
            0);
  ASSERT_EQ(RunCmd(Bin() + " logits --model " + out + " --exact --ids '1 403 407 261 378' --out " +
                   exact_npy + " 2>&1")
                .exit_code,
            0);
  auto f = ReadNpyF32(f32_npy);
  auto g = ReadNpyF32(q8_npy);
  auto e = ReadNpyF32(exact_npy);
  ASSERT_TRUE(f.ok() && g.ok() && e.ok());
  ASSERT_EQ(f->shape, (std::vector<int64_t>{5, 512}));
  ASSERT_EQ(g->shape, f->shape);
  ASSERT_EQ(e->shape, f->shape);
  double largest = 0;
  for (float v : f->data) largest = std::max(largest, std::fabs(static_cast<double>(v)));
  const double d_exact = MaxAbs(e->data, f->data), d_q8 = MaxAbs(g->data, f->data);
  std::printf(
      "[ quantize ] Q8_0 stories260K: max abs %.3g (exact F32 compute), %.3g (8-bit "
      "activations) vs F32; largest |logit| %.3g\n",
      d_exact, d_q8, largest);
  // Q8_0 rounds each weight by at most d/2 = amax/254 (relative RMS error ~0.5%); through
  // 5 layers the logits moved by 1.1% of the largest logit (exact F32 compute) and 1.4%
  // with 8-bit activations. The bound, 5% of the largest logit, leaves room for that and
  // is far below what a wrong scale or layout gives (logits off by their own size).
  EXPECT_GT(d_exact, 0.0) << "the weights were not quantized";
  EXPECT_LT(d_exact, 0.05 * largest);
  EXPECT_LT(d_q8, 0.05 * largest);
  for (const auto& p : {out, f32_npy, q8_npy, exact_npy}) std::remove(p.c_str());
}

// ---------------------------------------------------------------- plan

// Bytes from HumanBytes' "1.42 GiB" / "588.11 MiB" / "12 B".
double ParseHuman(const std::string& num, const std::string& unit) {
  double v = std::stod(num);
  for (const char* u : {"KiB", "MiB", "GiB", "TiB"}) {
    v *= 1024;
    if (unit == u) return v;
  }
  return std::stod(num);  // "B"
}

TEST(Cli, PlanSplitsTinyLlamaOverThreeWorkers) {
  RunResult r = RunCmd(Bin() +
                       " plan --shape tinyllama-1.1b --type F16 --workers "
                       "'a=1.5GiB@4,b=1GiB@2,c=0.8GiB@1' 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // TinyLlama-1.1B, computed here: vocab 32000, dim 2048, 22 layers, 32 heads / 4 KV heads
  // (KV dim 256), FFN 5632, untied output; F16 matrices, F32 norms.
  const double layer_bytes =
      2.0 * (2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 5632) + 4.0 * 2 * 2048;
  const double embd_bytes = 2.0 * 32000 * 2048;
  const double head_bytes = 2.0 * 32000 * 2048 + 4.0 * 2048;
  // Rows: stage, worker, node, [first, last), weights, kv cache, activations, total, memory.
  const std::regex row(
      R"((\d+)\s+(\S+)\s+\S+\s+\[(\d+), (\d+)\)\s+([\d.]+) (\w+)\s+[\d.]+ \w+\s+[\d.]+ \w+\s+([\d.]+) (\w+)\s+([\d.]+) (\w+))");
  std::vector<std::string> workers;
  int next_layer = 0, stages = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    EXPECT_EQ(std::stoi(m[1]), stages) << line;
    ++stages;
    workers.push_back(m[2]);
    const int first = std::stoi(m[3]), last = std::stoi(m[4]);
    EXPECT_EQ(first, next_layer) << "layer ranges must be contiguous: " << line;
    EXPECT_GT(last, first) << line;
    next_layer = last;
    // The weights column matches the layer range (HumanBytes keeps 3 significant digits).
    const double want = (last - first) * layer_bytes + (first == 0 ? embd_bytes : 0) +
                        (last == 22 ? head_bytes : 0);
    EXPECT_NEAR(ParseHuman(m[5], m[6]), want, 0.006 * want) << line;
    // Each stage fits its worker.
    EXPECT_LE(ParseHuman(m[7], m[8]), ParseHuman(m[9], m[10])) << line;
  }
  EXPECT_EQ(stages, 3) << r.out;
  EXPECT_EQ(next_layer, 22) << "the stages must cover [0, 22): " << r.out;
  EXPECT_THAT(workers, ::testing::UnorderedElementsAre("a", "b", "c"));
  EXPECT_THAT(r.out, HasSubstr("22 layers"));

  // Two small workers: refused, naming what is needed, what is offered, and the shortfall.
  RunResult no = RunCmd(Bin() +
                        " plan --shape tinyllama-1.1b --type F16 --workers "
                        "'a=1GiB@4,b=0.5GiB@2' 2>&1");
  EXPECT_NE(no.exit_code, 0);
  EXPECT_THAT(no.out, HasSubstr("does not fit"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      no.out, m,
      std::regex(
          R"(needs ([\d.]+) (\w+) of weights.*= ([\d.]+) (\w+);.*offer ([\d.]+) (\w+) in all.*short by ([\d.]+) (\w+))")))
      << no.out;
  const double weights = ParseHuman(m[1], m[2]), need = ParseHuman(m[3], m[4]),
               offer = ParseHuman(m[5], m[6]), short_by = ParseHuman(m[7], m[8]);
  const double all_weights = 22 * layer_bytes + embd_bytes + head_bytes;
  EXPECT_NEAR(weights, all_weights, 0.006 * all_weights);
  EXPECT_LT(offer, 1.5 * (1 << 30));  // at most what the two workers have
  EXPECT_NEAR(short_by, need - offer, 0.01 * need) << no.out;
}

// The first plan a new user asks for: Llama 3 8B as most GGUF files have it (Q4_K_M) on
// three small workers fits with the defaults (an F16 KV cache filling what the weights
// leave), and says how many full-context sequences its cache holds.
TEST(Cli, PlanOfALlamaCppFileTypeFitsSmallWorkersByDefault) {
  RunResult r = RunCmd(Bin() +
                       " plan --shape llama-3-8b --type Q4_K_M --workers a=8GiB,b=6GiB,c=4GiB 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("llama-3-8b (Q4_K_M)"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m,
      std::regex(R"(KV cache: (\d+) positions per stage \(F16\) = (\d+) sequences of 8192 tokens)")))
      << r.out;
  const long positions = std::stol(m[1]), sequences = std::stol(m[2]);
  EXPECT_EQ(sequences, positions / 8192) << r.out;
  EXPECT_GE(sequences, 1) << r.out;
  // The explicit settings of before (8 sequences of F32) do not fit, and the refusal names
  // settings that do.
  RunResult f32 = RunCmd(Bin() +
                         " plan --shape llama-3-8b --type Q4_K_M --kv-type f32 --kv-sequences 8 "
                         "--workers a=8GiB,b=6GiB,c=4GiB 2>&1");
  EXPECT_NE(f32.exit_code, 0);
  EXPECT_THAT(f32.out, HasSubstr("--kv-type f16"));
  EXPECT_THAT(f32.out, HasSubstr("--kv-sequences "));
  // An unknown type or shape is named, with the known ones.
  RunResult type = RunCmd(Bin() + " plan --shape llama-3-8b --type Q4_K_Q --workers a=8GiB 2>&1");
  EXPECT_NE(type.exit_code, 0);
  EXPECT_THAT(type.out, HasSubstr("--type: 'Q4_K_Q' is not a known weight type"));
  EXPECT_THAT(type.out, HasSubstr("Q4_K_M"));
  RunResult shape = RunCmd(Bin() + " plan --shape llama-9b --type Q4_K_M --workers a=8GiB 2>&1");
  EXPECT_NE(shape.exit_code, 0);
  EXPECT_THAT(shape.out, HasSubstr("--shape: 'llama-9b' is not a known shape"));
  EXPECT_THAT(shape.out, HasSubstr("llama-3-8b"));
}

// Replicas: as many pipelines as the workers hold, each shown, the rest spares.
TEST(Cli, PlanShowsEachReplica) {
  const std::string workers = " --workers a=8GiB,b=8GiB,c=8GiB,d=8GiB,e=3GiB";
  RunResult r = RunCmd(Bin() + " plan --shape llama-3-8b --type Q4_K_M --replicas auto" + workers +
                       " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("replica 0:"));
  EXPECT_THAT(r.out, HasSubstr("replica 3:"));
  EXPECT_THAT(r.out, HasSubstr("spares: e"));
  RunResult five = RunCmd(Bin() + " plan --shape llama-3-8b --type Q4_K_M --replicas 5" + workers +
                          " 2>&1");
  EXPECT_EQ(five.exit_code, 1) << five.out;
  EXPECT_THAT(five.out, HasSubstr("5 replicas were asked for but the workers hold 4"));
  RunResult bad = RunCmd(Bin() + " plan --shape llama-3-8b --replicas many" + workers + " 2>&1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.out, HasSubstr("--replicas: 'many' is not a count or auto"));
}

// With --tp each worker is a group of T ranks: the table gives each rank's share, about 1/T
// of the stage's weights (computed here as in the test above).
TEST(Cli, PlanWithTensorParallelismShowsEachRanksShare) {
  RunResult r = RunCmd(Bin() + " plan --shape tinyllama-1.1b --type F16 --workers 'a=1GiB' --tp 4 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;  // the whole model (2.05 GiB) on ranks of 1 GiB
  const double layer_bytes =
      2.0 * (2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 5632) + 4.0 * 2 * 2048;
  const double all = 22 * layer_bytes + 2 * (2.0 * 32000 * 2048) + 4.0 * 2048;
  // stage, worker, node, layers, ranks, weights/rank, ...
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(0\s+a\s+\S+\s+\[0, 22\)\s+4\s+([\d.]+) (\w+))")))
      << r.out;
  const double per_rank = ParseHuman(m[1], m[2]);
  EXPECT_NEAR(per_rank, all / 4, 0.01 * all) << r.out;
  EXPECT_THAT(r.out, HasSubstr("weights/rank"));
  RunResult bad = RunCmd(Bin() + " plan --shape tinyllama-1.1b --type F16 --workers 'a=1GiB' --tp 3 2>&1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.out, HasSubstr("does not divide the model's 32 attention heads"));
}

// --help shows numbers as numbers: every number-valued flag says INT or FLOAT, never TEXT,
// and no default or range is printed in exponent form.
TEST(Cli, HelpShowsNumbersAsNumbers) {
  const std::regex text_number(R"(TEXT=[-0-9.]+(\s|$))");
  for (const char* cmd : {"serve", "generate", "status", "plan"}) {
    RunResult r = RunCmd(Bin() + " " + cmd + " --help");
    ASSERT_EQ(r.exit_code, 0) << cmd;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_FALSE(std::regex_search(line, text_number)) << cmd << ": " << line;
      EXPECT_THAT(line, Not(HasSubstr("e+0"))) << cmd << ": " << line;
    }
  }
  RunResult serve = RunCmd(Bin() + " serve --help");
  EXPECT_THAT(serve.out, HasSubstr("--max-running INT=64"));
  EXPECT_THAT(serve.out, HasSubstr("--http-idle-timeout-s INT=30"));
  EXPECT_THAT(serve.out, HasSubstr("--memory-fraction FLOAT=0.9"));
  EXPECT_THAT(serve.out, HasSubstr("--quantized-activations BOOL=true"));
}

// ---------------------------------------------------------------- serve, status, remote generate

// A child process with its output in a log file; killed if the test ends early.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& log) : log_(log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // The exit status if the process has ended (reaping it), else nullopt.
  std::optional<int> Poll() {
    int st = 0;
    if (pid_ <= 0 || ::waitpid(pid_, &st, WNOHANG) != pid_) return std::nullopt;
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  // Waits (polling the process state) up to `timeout` for it to end.
  std::optional<int> Wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto rc = Poll()) return rc;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  void Signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  std::string Log() const { return ReadBytes(log_); }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

TEST(Cli, ServeStatusAndRemoteGenerateMatchTheInProcessRun) {
  const int port = testing::FreePort();
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  const std::string control = "127.0.0.1:" + std::to_string(testing::FreePort());
  // An F32 KV cache (not serve's F16 default): compared with the in-process run's, exactly.
  const std::string http = "127.0.0.1:" + std::to_string(testing::FreePort());
  Child serve({Bin(), "serve", "--model", Bundled(), "--workers", "2", "--listen", addr,
               "--control-listen", control, "--http-listen", http, "--kv-type", "f32"},
              TmpPath("serve.log"));
  // Ready when `cascade status` reports serving (polled; fails fast if serve exits).
  RunResult status;
  bool serving = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto rc = serve.Poll()) FAIL() << "serve exited with " << *rc << ":\n" << serve.Log();
    if (testing::WaitForPort("127.0.0.1", port, std::chrono::milliseconds(200))) {
      status = RunCmd(Bin() + " status --control " + control + " 2>/dev/null");
      if (status.exit_code == 0 && status.out.find("serving  yes") != std::string::npos) {
        serving = true;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(serving) << "not serving after 120 s:\n" << status.out << "\n" << serve.Log();
  EXPECT_THAT(status.out, HasSubstr("model    stories260K"));
  EXPECT_THAT(status.out, HasSubstr("serving  yes"));
  // Two stages (two workers) covering the 5 layers contiguously.
  const std::regex stage_row(R"(^(\d+)\s+(local-\d+)\s+\[(\d+),(\d+)\))");
  int next_layer = 0, stages = 0;
  std::istringstream lines(status.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, stage_row)) continue;
    EXPECT_EQ(std::stoi(m[1]), stages++) << line;
    EXPECT_EQ(std::stoi(m[3]), next_layer) << line;
    next_layer = std::stoi(m[4]);
  }
  EXPECT_EQ(stages, 2) << status.out;
  EXPECT_EQ(next_layer, 5) << status.out;
  // The start-up line names every address it serves.
  EXPECT_THAT(serve.Log(), HasSubstr("public gRPC " + addr + ", HTTP http://" + http +
                                     ", control " + control));
  // The public API's address by mistake: an error that says which address to give.
  RunResult wrong = RunCmd(Bin() + " status --control " + addr + " 2>&1");
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.out, HasSubstr("UNIMPLEMENTED"));
  EXPECT_THAT(wrong.out, HasSubstr("control address"));
  // The old spelling still works, and says what it is now.
  RunResult old_flag = RunCmd(Bin() + " status --server " + control + " 2>&1");
  EXPECT_EQ(old_flag.exit_code, 0) << old_flag.out;
  EXPECT_THAT(old_flag.out, HasSubstr("--server is now --control"));
  EXPECT_THAT(old_flag.out, HasSubstr("serving  yes"));
  // generate --server takes the public address; the control address says so.
  RunResult wrong_generate =
      RunCmd(Bin() + " generate --server " + control + " --prompt 'Once' --max-tokens 2 2>&1");
  EXPECT_EQ(wrong_generate.exit_code, 1);
  EXPECT_THAT(wrong_generate.out, HasSubstr("not the public API"));
  EXPECT_THAT(wrong_generate.out, HasSubstr("status --control"));

  // A second serve on the same control port: one clear line, not gRPC's error dump.
  RunResult clash = RunCmd(Bin() + " serve --model " + Bundled() + " --listen 127.0.0.1:" +
                           std::to_string(testing::FreePort()) + " --control-listen " + control +
                           " 2>&1");
  EXPECT_EQ(clash.exit_code, 1);
  EXPECT_THAT(clash.out, HasSubstr("control port " + control + " is already in use"));
  EXPECT_THAT(clash.out, HasSubstr("pass --control-listen"));
  EXPECT_THAT(clash.out, Not(HasSubstr("No address added")));
  EXPECT_THAT(clash.out, Not(HasSubstr("chttp2_server")));
  EXPECT_THAT(clash.out, Not(HasSubstr("UNKNOWN:")));

  const std::string args = " --temperature 0 --max-tokens 20 --prompt 'Once upon a time'";
  RunResult remote = RunCmd(Bin() + " generate --server " + addr + args);
  RunResult local = RunCmd(Bin() + " generate --model " + Bundled() + args);
  ASSERT_EQ(remote.exit_code, 0) << serve.Log();
  ASSERT_EQ(local.exit_code, 0);
  EXPECT_THAT(local.out, ::testing::StartsWith("Once upon a time"));
  EXPECT_GT(Trim(local.out).size(), std::string("Once upon a time").size() + 20);
  EXPECT_EQ(Trim(remote.out), Trim(local.out));
  // The server logs each finished request at info (serve's default level).
  EXPECT_THAT(serve.Log(), HasSubstr("prompt + 20 output tokens"));
  EXPECT_THAT(serve.Log(), HasSubstr("finish length"));

  serve.Signal(SIGTERM);
  const auto rc = serve.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(rc.has_value()) << "serve did not exit within 60 s of SIGTERM:\n" << serve.Log();
  EXPECT_EQ(*rc, 0) << serve.Log();
  std::remove(TmpPath("serve.log").c_str());
}

// ---------------------------------------------------------------- sharded safetensors

struct RawTensor {
  std::string name;
  nlohmann::ordered_json info;  // dtype, shape (data_offsets rewritten)
  std::string bytes;
};

// Splits a safetensors file (8-byte little-endian header length, JSON header, data) into
// its tensors, by hand.
std::vector<RawTensor> SplitSafetensors(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  std::vector<RawTensor> out;
  const auto header = nlohmann::ordered_json::parse(file.substr(8, n));
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t b = v["data_offsets"][0], e = v["data_offsets"][1];
    out.push_back(
        {name, {{"dtype", v["dtype"]}, {"shape", v["shape"]}}, file.substr(8 + n + b, e - b)});
  }
  return out;
}

void WriteShard(const std::string& path, const std::vector<RawTensor>& ts, size_t begin,
                size_t end) {
  nlohmann::ordered_json h;
  uint64_t off = 0;
  for (size_t i = begin; i < end; ++i) {
    nlohmann::ordered_json info = ts[i].info;
    info["data_offsets"] = {off, off + ts[i].bytes.size()};
    h[ts[i].name] = info;
    off += ts[i].bytes.size();
  }
  std::string header = h.dump();
  while (header.size() % 8 != 0) header.push_back(' ');
  std::ofstream out(path, std::ios::binary);
  uint64_t len = header.size();
  for (int i = 0; i < 8; ++i, len >>= 8) out.put(static_cast<char>(len & 0xff));
  out << header;
  for (size_t i = begin; i < end; ++i) out << ts[i].bytes;
}

// The Hugging Face folder split into two shards with an index: `cascade logits` gives the
// same logits, bit for bit, as on the single-file folder, and both match the reference.
TEST(Cli, ShardedSafetensorsGiveTheSameLogits) {
  const std::string hf = testing::SharedPath("models/stories260K/hf");
  CASCADE_REQUIRE_SHARED(hf + "/model.safetensors");
  const std::string dir = TmpPath("sharded");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  for (const char* f : {"config.json", "generation_config.json", "special_tokens_map.json",
                        "tokenizer.json", "tokenizer_config.json"}) {
    std::ofstream(dir + "/" + f, std::ios::binary) << ReadBytes(hf + "/" + f);
  }
  const auto tensors = SplitSafetensors(ReadBytes(hf + "/model.safetensors"));
  ASSERT_EQ(tensors.size(), 47u);
  const size_t half = tensors.size() / 2;
  const std::string s1 = "model-00001-of-00002.safetensors",
                    s2 = "model-00002-of-00002.safetensors";
  WriteShard(dir + "/" + s1, tensors, 0, half);
  WriteShard(dir + "/" + s2, tensors, half, tensors.size());
  nlohmann::ordered_json index;
  index["metadata"]["total_size"] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    index["weight_map"][tensors[i].name] = i < half ? s1 : s2;
    index["metadata"]["total_size"] =
        index["metadata"]["total_size"].get<uint64_t>() + tensors[i].bytes.size();
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);

  const std::string ids = " --ids '1 403 407 261 378' --out ";
  const std::string a = TmpPath("single.npy"), b = TmpPath("sharded.npy");
  ASSERT_EQ(RunCmd(Bin() + " logits --model " + hf + ids + a + " 2>&1").exit_code, 0);
  RunResult r = RunCmd(Bin() + " logits --model " + dir + ids + b + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto single = ReadNpyF32(a);
  auto sharded = ReadNpyF32(b);
  auto ref = ReadNpyF32(testing::SharedPath("models/stories260K/prompt-greedy.logits.npy"));
  ASSERT_TRUE(single.ok() && sharded.ok() && ref.ok());
  ASSERT_EQ(sharded->shape, (std::vector<int64_t>{5, 512}));
  ASSERT_EQ(sharded->shape, single->shape);
  EXPECT_EQ(std::memcmp(sharded->data.data(), single->data.data(), single->data.size() * 4), 0);
  for (size_t i = 0; i < sharded->data.size(); ++i) {
    ASSERT_NEAR(sharded->data[i], ref->data[i], 1e-4) << i;
  }
  for (const char* f :
       {"config.json", "generation_config.json", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json", "model.safetensors.index.json"}) {
    std::remove((dir + "/" + f).c_str());
  }
  std::remove((dir + "/" + s1).c_str());
  std::remove((dir + "/" + s2).c_str());
  ::rmdir(dir.c_str());
  std::remove(a.c_str());
  std::remove(b.c_str());
}

}  // namespace
}  // namespace cascade
