#include "launch/topology.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(Topology, TwoPretendNodesOfTwoRanksWithTp2) {
  auto t = MakeTopology({0, 0, 0, 0}, 2, 2);  // one machine, --ranks-per-node 2
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nodes, 2);
  EXPECT_EQ(t->groups, 2);
  EXPECT_THAT(t->leaders, ElementsAre(0, 2));
  EXPECT_EQ(t->ranks[3].node, 1);
  EXPECT_EQ(t->ranks[3].group, 1);
  EXPECT_EQ(t->ranks[3].group_rank, 1);
  EXPECT_EQ(t->ranks[3].leader, 2);
  EXPECT_EQ(t->Describe(), "2 nodes x 2 ranks; 2 stages of 2 ranks (tensor parallel)");
}

TEST(Topology, DefaultIsOneGroupPerNode) {
  // Ranks of two machines interleaved (round-robin placement): nodes keyed by machine.
  auto t = MakeTopology({0, 1, 0, 1, 0, 1}, 0, 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->nodes, 2);
  EXPECT_EQ(t->groups, 2);
  EXPECT_THAT(t->leaders, ElementsAre(0, 1));
  EXPECT_EQ(t->ranks[4].group, 0);
  EXPECT_EQ(t->ranks[4].group_rank, 2);
  EXPECT_EQ(t->ranks[5].leader, 1);
}

TEST(Topology, SeveralStagesPerNodeInPipelineOrder) {
  auto t = MakeTopology({0, 0, 0, 0, 4, 4, 4, 4}, 2, 0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->groups, 4);
  EXPECT_THAT(t->leaders, ElementsAre(0, 2, 4, 6));
  EXPECT_EQ(t->Describe(), "2 nodes x 4 ranks; 4 stages of 2 ranks (tensor parallel)");
  auto one = MakeTopology({0, 0, 0}, 1, 0);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->Describe(), "1 node x 3 ranks; 3 stages of 1 rank");
}

TEST(Topology, RefusesSplitsThatDoNotFit) {
  EXPECT_THAT(MakeTopology({0, 0, 0}, 2, 0).status().message(), HasSubstr("--tp 2 does not divide"));
  EXPECT_THAT(MakeTopology({0, 0, 0, 0}, 0, 3).status().message(),
              HasSubstr("--ranks-per-node 3 does not divide"));
  EXPECT_FALSE(MakeTopology({}, 1, 0).ok());
}

}  // namespace
}  // namespace cascade
