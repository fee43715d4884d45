// End-to-end tests of the `cascade` command-line tool, run as a separate process the way
// users and other tools call it.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_util.h"
#include "util/npy.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace cascade
