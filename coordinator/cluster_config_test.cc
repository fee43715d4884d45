#include "coordinator/cluster_config.h"

#include <unistd.h>

#include <fstream>

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

TEST(ClusterConfig, ReadsEveryKey) {
  CoordinatorOptions o;
  const std::string path = Write("ok", R"(
model: /models/m.gguf
listen: 0.0.0.0:9000
workers: 3
min_stages: 2
kv_sequences: 12
kv_block_size: 32
max_batch_tokens: 1024
prefill_chunk: 128
max_running: 10
max_waiting: 20
device: cuda:1
data_plane: grpc
data_listen: 0.0.0.0:9001
)");
  ASSERT_TRUE(LoadClusterConfig(path, &o).ok());
  EXPECT_EQ(o.model_path, "/models/m.gguf");
  EXPECT_EQ(o.listen, "0.0.0.0:9000");
  EXPECT_EQ(o.workers, 3);
  EXPECT_EQ(o.min_stages, 2);
  EXPECT_EQ(o.kv_sequences, 12);
  EXPECT_EQ(o.kv_block_size, 32);
  EXPECT_EQ(o.max_batch_tokens, 1024);
  EXPECT_EQ(o.prefill_chunk, 128);
  EXPECT_EQ(o.max_running, 10);
  EXPECT_EQ(o.max_waiting, 20);
  EXPECT_EQ(o.device, "cuda:1");
  EXPECT_EQ(o.data_plane, "grpc");
  EXPECT_EQ(o.data_listen, "0.0.0.0:9001");
}

TEST(ClusterConfig, TheExampleFileLoads) {
  CoordinatorOptions o;
  const absl::Status st =
      LoadClusterConfig(std::string(CASCADE_SOURCE_DIR) + "/deploy/cluster.example.yaml", &o);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(o.workers, 3);
  EXPECT_EQ(o.data_plane, "tcp");
  EXPECT_EQ(o.data_listen, "0.0.0.0:50052");
}

TEST(ClusterConfig, FlagsOverrideTheFile) {
  CoordinatorOptions o;
  ASSERT_TRUE(LoadClusterConfig(Write("flags", "workers: 3\nmodel: a.gguf\n"), &o).ok());
  CLI::App app;
  AddCoordinatorFlags(app, &o);
  const char* argv[] = {"x", "--workers", "5"};
  app.parse(3, const_cast<char**>(argv));
  EXPECT_EQ(o.workers, 5);
  EXPECT_EQ(o.model_path, "a.gguf");
}

TEST(ClusterConfig, NamesBadKeysAndValues) {
  CoordinatorOptions o;
  auto st = LoadClusterConfig(Write("unknown", "wrokers: 3\n"), &o);
  EXPECT_THAT(std::string(st.message()), HasSubstr("unknown key 'wrokers'"));
  st = LoadClusterConfig(Write("type", "workers: lots\n"), &o);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'workers' must be"));
  st = LoadClusterConfig(Write("plane", "data_plane: mpi\n"), &o);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'data_plane' must be tcp or grpc"));
  st = LoadClusterConfig(Write("syntax", "workers: [1,\n"), &o);
  EXPECT_FALSE(st.ok());
  st = LoadClusterConfig("/nonexistent/cluster.yaml", &o);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("/nonexistent/cluster.yaml"));
}

}  // namespace
}  // namespace cascade
