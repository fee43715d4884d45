#include "coordinator/cluster_config.h"

#include <unistd.h>

#include <fstream>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name + std::to_string(::getpid()) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(ClusterConfig, ReadsEveryKeyIntoItsPlaceInTheTree) {
  ClusterConfig c;
  const std::string path = Write("ok", R"(
model: /models/m.gguf
listen: 0.0.0.0:9000
workers: 3
min_stages: 2
kv_sequences: 12
kv_block_size: 32
kv_type: F16
max_batch_tokens: 1024
prefill_chunk: 128
max_running: 10
max_waiting: 20
prefix_cache: off
device: cuda:1
data_plane: grpc
data_listen: 0.0.0.0:9001
quantized_activations: false
drain_timeout_s: 2.5
)");
  ASSERT_TRUE(LoadClusterFile(path, &c).ok());
  EXPECT_EQ(c.model, "/models/m.gguf");
  EXPECT_EQ(c.server.listen, "0.0.0.0:9000");
  EXPECT_EQ(c.bring_up.workers, 3);
  EXPECT_EQ(c.plan.min_stages, 2);
  EXPECT_EQ(c.plan.kv_sequences, 12);
  EXPECT_EQ(c.plan.kv_block_size, 32);
  EXPECT_EQ(c.plan.kv_type, TensorType::kF16);
  EXPECT_EQ(c.plan.batch_tokens, 1024);
  EXPECT_EQ(c.scheduler.prefill_chunk, 128);
  EXPECT_EQ(c.scheduler.max_running, 10);
  EXPECT_EQ(c.scheduler.max_waiting, 20);
  EXPECT_FALSE(c.scheduler.prefix_cache);
  ASSERT_TRUE(c.stage.device.has_value());
  EXPECT_EQ(*c.stage.device, (DeviceSpec{DeviceKind::kCuda, 1}));
  EXPECT_EQ(c.data_plane.kind, DataPlane::kGrpc);
  EXPECT_EQ(c.data_plane.listen, "0.0.0.0:9001");
  EXPECT_FALSE(c.stage.quantized_activations);
  EXPECT_EQ(c.bring_up.drain_timeout_s, 2.5);
}

TEST(ClusterConfig, TheExampleFileLoads) {
  ClusterConfig c;
  const absl::Status st =
      LoadClusterFile(std::string(CASCADE_SOURCE_DIR) + "/deploy/cluster.example.yaml", &c);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(c.bring_up.workers, 3);
  EXPECT_EQ(c.data_plane.kind, DataPlane::kTcp);
  EXPECT_EQ(c.data_plane.listen, "0.0.0.0:50052");
}

// The table drives both sources: every flag has a YAML key and every key a flag, and the
// two set the same value in the same place.
TEST(ClusterConfig, EveryFlagHasAYamlKeyAndTheReverse) {
  ClusterConfig c;
  CLI::App app;
  AddClusterFlags(app, &c);
  std::set<std::string> flags;
  for (const CLI::Option* o : app.get_options()) {
    for (const std::string& name : o->get_lnames()) flags.insert("--" + name);
  }
  flags.erase("--help");
  std::set<std::string> table_flags;
  for (const ClusterOption& o : ClusterOptions(&c)) {
    table_flags.insert(o.flag);
    std::string key = o.flag.substr(2);
    for (char& ch : key) ch = ch == '-' ? '_' : ch;
    EXPECT_EQ(o.key, key);
  }
  EXPECT_EQ(flags, table_flags);

  // Each setting, set once by flag and once by file, to a value other than its default.
  for (const ClusterOption& entry : ClusterOptions(&c)) {
    std::string value;
    const std::string def = entry.show();
    for (const char* v : {"7", "0.25", "true", "false", "grpc", "tcp", "cpu", "cuda:2", "x.gguf",
                          "10.0.0.1:7000", "f16", "f32", "round-robin", "ngram", "off"}) {
      ClusterConfig probe;
      for (ClusterOption& o : ClusterOptions(&probe)) {
        if (o.flag == entry.flag && o.set(v).ok() && o.show() != def) value = v;
      }
      if (!value.empty()) break;
    }
    ASSERT_FALSE(value.empty()) << entry.flag << " takes none of the probe values";
    ClusterConfig by_flag, by_file;
    CLI::App a;
    AddClusterFlags(a, &by_flag);
    std::vector<std::string> args = {"x", entry.flag, value};
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    a.parse(static_cast<int>(argv.size()), argv.data());
    ASSERT_TRUE(LoadClusterFile(Write("one", entry.key + ": '" + value + "'\n"), &by_file).ok())
        << entry.key;
    auto shown = [&](ClusterConfig& cfg) {
      for (ClusterOption& o : ClusterOptions(&cfg)) {
        if (o.flag == entry.flag) return o.show();
      }
      return std::string();
    };
    EXPECT_EQ(shown(by_flag), shown(by_file)) << entry.flag;
    EXPECT_NE(shown(by_flag), def) << entry.flag;
  }
}

TEST(ClusterConfig, FlagsOverrideTheFile) {
  ClusterConfig c;
  ASSERT_TRUE(LoadClusterFile(Write("flags", "workers: 3\nmodel: a.gguf\n"), &c).ok());
  CLI::App app;
  AddClusterFlags(app, &c);
  const char* argv[] = {"x", "--workers", "5"};
  app.parse(3, const_cast<char**>(argv));
  EXPECT_EQ(c.bring_up.workers, 5);
  EXPECT_EQ(c.model, "a.gguf");
}

TEST(ClusterConfig, NamesBadKeysAndValues) {
  ClusterConfig c;
  auto st = LoadClusterFile(Write("unknown", "wrokers: 3\n"), &c);
  EXPECT_THAT(std::string(st.message()), HasSubstr("unknown key 'wrokers'"));
  st = LoadClusterFile(Write("type", "workers: lots\n"), &c);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'workers'"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("'lots' is not an integer"));
  st = LoadClusterFile(Write("range", "workers: 0\n"), &c);
  EXPECT_THAT(std::string(st.message()), HasSubstr("[1, 4096]"));
  st = LoadClusterFile(Write("plane", "data_plane: carrier-pigeon\n"), &c);
  EXPECT_THAT(std::string(st.message()), HasSubstr("tcp, grpc or mpi"));
  st = LoadClusterFile(Write("kv", "kv_type: q4_0\n"), &c);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'q4_0' is not f32 or f16"));
  st = LoadClusterFile(Write("switch", "prefix_cache: sometimes\n"), &c);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'sometimes' is not on or off"));
  st = LoadClusterFile(Write("device", "device: tpu\n"), &c);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'tpu'"));
  st = LoadClusterFile(Write("list", "workers: [1, 2]\n"), &c);
  EXPECT_THAT(std::string(st.message()), HasSubstr("must be a single value"));
  st = LoadClusterFile(Write("syntax", "workers: [1,\n"), &c);
  EXPECT_FALSE(st.ok());
  st = LoadClusterFile("/nonexistent/cluster.yaml", &c);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("/nonexistent/cluster.yaml"));
  // The same checks on the command line.
  CLI::App app;
  AddClusterFlags(app, &c);
  const char* argv[] = {"x", "--max-running", "-4"};
  EXPECT_THROW(app.parse(3, const_cast<char**>(argv)), CLI::ValidationError);
}

}  // namespace
}  // namespace cascade
