#include "common/net/shard_addresses.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace engram {
namespace {

using Addresses = std::vector<std::vector<std::string>>;

TEST(ShardAddressesTest, ParsesShardsAndReplicas) {
  absl::StatusOr<Addresses> a = ParseShardAddresses("a:7070|b:7070,c:7070|d:7070");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (Addresses{{"a:7070", "b:7070"}, {"c:7070", "d:7070"}}));

  a = ParseShardAddresses("127.0.0.1:1,[::1]:65535,host.example.com:80");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (Addresses{{"127.0.0.1:1"}, {"[::1]:65535"}, {"host.example.com:80"}}));
}

TEST(ShardAddressesTest, FormatReadsBack) {
  const Addresses a = {{"a:1", "b:2"}, {"c:3"}, {"[::1]:4", "e:5", "f:6"}};
  EXPECT_EQ(FormatShardAddresses(a), "a:1|b:2,c:3,[::1]:4|e:5|f:6");
  absl::StatusOr<Addresses> back = ParseShardAddresses(FormatShardAddresses(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);
  EXPECT_EQ(FormatShardAddresses({}), "");
}

TEST(ShardAddressesTest, RejectsBadStringsWithOneLine) {
  const struct {
    const char* text;
    const char* message;  // a part of the expected message
  } cases[] = {
      {"", "no addresses"},
      {",a:1", "shard 0 is empty"},
      {"a:1,,b:1", "shard 1 is empty"},
      {"a:1,", "shard 1 is empty"},
      {"a:1||b:1", "shard 0 has an empty replica"},
      {"a:1,|b:1", "shard 1 has an empty replica"},
      {"a:1|", "shard 0 has an empty replica"},
      {"a:1, b:1", "shard 1 replica 0: address \" b:1\" contains whitespace"},
      {"a:1|b :1", "shard 0 replica 1: address \"b :1\" contains whitespace"},
      {"a:1\t", "contains whitespace"},
      {"a", "shard 0 replica 0: address \"a\" has no :port"},
      {":7070", "has no host"},
      {"[]:7070", "has no host"},
      {"::1:7070", "IPv6 host without brackets"},
      {"a:", "has port \"\""},
      {"a:0", "has port \"0\""},
      {"a:65536", "has port \"65536\""},
      {"a:+70", "has port \"+70\""},
      {"a:7o7o", "has port \"7o7o\""},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Addresses> a = ParseShardAddresses(c.text);
    ASSERT_FALSE(a.ok()) << "'" << c.text << "' parsed";
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    const std::string message(a.status().message());
    EXPECT_NE(message.find(c.message), std::string::npos) << c.text << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << c.text << ": " << message;
  }
}

TEST(ShardAddressesTest, FromDnsNamesEveryPodOfTheStatefulSets) {
  absl::StatusOr<Addresses> a =
      ShardAddressesFromDns("engram-store.engram.svc.cluster.local", 2, 2, 7070);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(FormatShardAddresses(*a),
            "engram-store-0-0.engram-store.engram.svc.cluster.local:7070|"
            "engram-store-0-1.engram-store.engram.svc.cluster.local:7070,"
            "engram-store-1-0.engram-store.engram.svc.cluster.local:7070|"
            "engram-store-1-1.engram-store.engram.svc.cluster.local:7070");
  // What it makes is a valid shard-map string.
  EXPECT_TRUE(ParseShardAddresses(FormatShardAddresses(*a)).ok());

  a = ShardAddressesFromDns("es", 3, 1, 9);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (Addresses{{"es-0-0.es:9"}, {"es-1-0.es:9"}, {"es-2-0.es:9"}}));
}

TEST(ShardAddressesTest, FromDnsRejectsBadInput) {
  const std::string label63(63, 'a');
  const struct {
    std::string service;
    int shards, replicas, port;
    const char* message;
  } cases[] = {
      {"es.ns", 0, 1, 7070, "0 shards"},
      {"es.ns", -1, 1, 7070, "-1 shards"},
      {"es.ns", 1, 0, 7070, "0 replicas"},
      {"es.ns", 1 << 10, 1 << 10, 7070, "more than 65536 addresses"},
      {"es.ns", 1, 1, 0, "port 0"},
      {"es.ns", 1, 1, 65536, "port 65536"},
      {"", 1, 1, 7070, "the service name is empty"},
      {"es..ns", 1, 1, 7070, "empty label"},
      {"es.ns.", 1, 1, 7070, "empty label"},
      {".es", 1, 1, 7070, "empty label"},
      {"Engram.ns", 1, 1, 7070, "has 'E'"},
      {"es_1.ns", 1, 1, 7070, "has '_'"},
      {"es.ns:7070", 1, 1, 7070, "has ':'"},
      {"-es.ns", 1, 1, 7070, "starts or ends with '-'"},
      {"es.ns-", 1, 1, 7070, "starts or ends with '-'"},
      {label63 + "a.ns", 1, 1, 7070, "has 64 characters"},
      {label63 + ".ns", 1, 1, 7070, "pod name"},
      {std::string(60, 'a') + ".ns", 10, 1, 7070, "pod name"},
      {"es." + label63 + "." + label63 + "." + label63 + "." + std::string(57, 'a'), 1, 1, 7070,
       "longer than the 253 characters"},
      {"es." + label63 + "." + label63 + "." + label63 + "." + label63, 1, 1, 7070,
       "has 258 characters"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Addresses> a = ShardAddressesFromDns(c.service, c.shards, c.replicas, c.port);
    ASSERT_FALSE(a.ok()) << c.service << " " << c.shards << "x" << c.replicas << ":" << c.port;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(a.status().message());
    EXPECT_NE(message.find(c.message), std::string::npos) << c.service << ": " << message;
  }
  // The longest pod label DNS allows.
  EXPECT_TRUE(ShardAddressesFromDns(std::string(59, 'a') + ".ns", 10, 10, 7070).ok());
}

}  // namespace
}  // namespace engram
