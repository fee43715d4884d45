#include "transport/address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

TEST(Address, EverySchemeRoundTrips) {
  for (const char* text : {"tcp://10.1.2.3:50062", "grpc://worker-0.cascade:50061",
                           "tcp://[::1]:7", "inproc://stage-0", "mpi://3", "nccl://0"}) {
    auto a = ParseAddress(text);
    ASSERT_TRUE(a.ok()) << text << ": " << a.status();
    EXPECT_EQ(FormatAddress(*a), text);
  }
  auto tcp = ParseAddress("tcp://10.1.2.3:50062");
  EXPECT_EQ(tcp->scheme, Scheme::kTcp);
  EXPECT_EQ(tcp->host_port.host, "10.1.2.3");
  EXPECT_EQ(tcp->host_port.port, 50062);
  auto v6 = ParseAddress("tcp://[::1]:7");
  EXPECT_EQ(v6->host_port.host, "::1");
  EXPECT_EQ(ParseAddress("mpi://3")->rank, 3);
  EXPECT_EQ(ParseAddress("inproc://stage-0")->name, "stage-0");
}

TEST(Address, ABareHostPortIsGrpc) {
  auto a = ParseAddress("127.0.0.1:50051");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->scheme, Scheme::kGrpc);
  EXPECT_EQ(FormatAddress(*a), "grpc://127.0.0.1:50051");
}

TEST(Address, EveryMalformedAddressIsNamed) {
  struct Case {
    const char* text;
    const char* why;
  } cases[] = {
      {"tcp://nohost", "not host:port"},   {"h:99999", "port"},
      {"h:", "not host:port"},             {"tcp://:5", "not host:port"},
      {"udp://h:1", "unknown scheme"},     {"mpi://x", "not a rank"},
      {"mpi://-1", "not a rank"},          {"inproc://a b", "not an endpoint name"},
      {"inproc://", "not an endpoint name"}, {"tcp://::1:5", "brackets"},
  };
  for (const Case& c : cases) {
    auto a = ParseAddress(c.text);
    ASSERT_FALSE(a.ok()) << c.text;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(c.why)) << c.text;
  }
}

TEST(Address, WildcardListenHostsAdvertiseLoopback) {
  EXPECT_EQ(AdvertisedHostPort("0.0.0.0:0", 4321), "127.0.0.1:4321");
  EXPECT_EQ(AdvertisedHostPort("[::]:80", 4321), "127.0.0.1:4321");
  EXPECT_EQ(AdvertisedHostPort("10.0.0.5:0", 99), "10.0.0.5:99");
}

}  // namespace
}  // namespace cascade
