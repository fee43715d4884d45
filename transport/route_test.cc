// Routing between the ranks of one MPI job: NCCL only between ranks of one node, and only
// where this rank runs the NCCL data plane; everything else stays on MPI. Fake mpi:// and
// nccl:// transports stand in for the real ones (which need MPI and GPUs).
#include "transport/route.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

// A sender that remembers which fake transport made it, for which rank.
class TaggedSender : public ActivationSender {
 public:
  explicit TaggedSender(std::string made_by) : made_by_(std::move(made_by)) {}
  absl::Status Send(StageFrame) override { return absl::OkStatus(); }
  void Close() override {}
  const std::string& made_by() const { return made_by_; }

 private:
  std::string made_by_;
};

TransportFactory FakeTransport(const std::string& name) {
  TransportFactory f;
  f.activation = [name](const Address& a,
                        const SenderOptions&) -> absl::StatusOr<std::unique_ptr<ActivationSender>> {
    if (a.rank < 0 || a.rank >= 4) return absl::InvalidArgumentError("outside the job");
    return std::make_unique<TaggedSender>(name + "://" + std::to_string(a.rank));
  };
  return f;
}

// Which transport made the activation sender to `rank` (or the error).
std::string Route(const TransportFactory& f, int rank) {
  Address a;
  a.scheme = Scheme::kMpi;
  a.rank = rank;
  auto s = f.activation(a, {});
  if (!s.ok()) return std::string(s.status().message());
  return static_cast<TaggedSender&>(**s).made_by();
}

TEST(RankLinkScheme, NcclOnlyBetweenRanksOfOneNodeWithTheNcclPlane) {
  EXPECT_EQ(RankLinkScheme(0, 0, true), Scheme::kNccl);
  EXPECT_EQ(RankLinkScheme(1, 1, true), Scheme::kNccl);
  EXPECT_EQ(RankLinkScheme(0, 1, true), Scheme::kMpi);   // another node
  EXPECT_EQ(RankLinkScheme(0, 0, false), Scheme::kMpi);  // no NCCL data plane here
  EXPECT_EQ(RankLinkScheme(0, -1, true), Scheme::kMpi);  // a rank of no known node
  EXPECT_EQ(RankLinkScheme(-1, -1, true), Scheme::kMpi);
}

TEST(RouteActivationsByNode, SameNodeRanksGoOverNcclTheOthersOverMpi) {
  RegisterTransport(Scheme::kNccl, FakeTransport("nccl"));
  // Ranks 0, 1 on node 0 and 2, 3 on node 1; this rank is on node 1.
  const TransportFactory routed =
      RouteActivationsByNode(FakeTransport("mpi"), {0, 0, 1, 1}, 1, true);
  EXPECT_EQ(Route(routed, 3), "nccl://3");
  EXPECT_EQ(Route(routed, 2), "nccl://2");
  EXPECT_EQ(Route(routed, 1), "mpi://1");
  EXPECT_EQ(Route(routed, 0), "mpi://0");
  EXPECT_EQ(Route(routed, 7), "outside the job");  // MPI's own refusal
  UnregisterTransport(Scheme::kNccl);
}

TEST(RouteActivationsByNode, WithoutTheNcclPlaneEverythingStaysOnMpi) {
  const TransportFactory routed =
      RouteActivationsByNode(FakeTransport("mpi"), {0, 0, 1, 1}, 1, false);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(Route(routed, r), "mpi://" + std::to_string(r));
}

TEST(RouteActivationsByNode, ANcclRouteWithoutTheNcclTransportIsRefusedByName) {
  UnregisterTransport(Scheme::kNccl);
  const TransportFactory routed = RouteActivationsByNode(FakeTransport("mpi"), {0, 0}, 0, true);
  EXPECT_THAT(Route(routed, 1), ::testing::HasSubstr("nccl"));
}

TEST(RouteActivationsByNode, ResultsAndListeningAreMpis) {
  TransportFactory mpi = FakeTransport("mpi");
  bool result_called = false;
  mpi.result = [&result_called](
                   const Address&,
                   const SenderOptions&) -> absl::StatusOr<std::unique_ptr<ResultSender>> {
    result_called = true;
    return absl::UnimplementedError("fake");
  };
  const TransportFactory routed = RouteActivationsByNode(mpi, {0, 0}, 0, true);
  ASSERT_TRUE(routed.result);
  EXPECT_FALSE(routed.result(Address{}, {}).ok());
  EXPECT_TRUE(result_called);
  EXPECT_FALSE(routed.listen);
}

}  // namespace
}  // namespace cascade
