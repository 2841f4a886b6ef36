// ClientOptions::Validate names the first bad field, and Create refuses the
// same options before it reads any file.
#include <string>

#include "client/engram_client.h"
#include "gtest/gtest.h"

namespace engram {
namespace {

ClientOptions Good() {
  ClientOptions o;
  o.table_dir = "/nonexistent-table";
  o.shard_addresses = {{"127.0.0.1:1"}, {"127.0.0.1:2", "127.0.0.1:3"}};
  return o;
}

TEST(ClientOptions, DefaultsWithATableAreValid) {
  EXPECT_TRUE(Good().Validate().ok()) << Good().Validate();
}

TEST(ClientOptions, ValidateNamesTheBadField) {
  struct Case {
    void (*change)(ClientOptions&);
    std::string message_part;
  };
  const Case cases[] = {
      {[](ClientOptions& o) { o.table_dir.clear(); }, "table_dir"},
      {[](ClientOptions& o) { o.shard_addresses[1].clear(); }, "shard 1 has no address"},
      {[](ClientOptions& o) { o.rpc_deadline = absl::ZeroDuration(); }, "rpc_deadline"},
      {[](ClientOptions& o) { o.max_rows_per_rpc = 0; }, "max_rows_per_rpc"},
      {[](ClientOptions& o) { o.channels_per_replica = 0; }, "channels_per_replica"},
      {[](ClientOptions& o) { o.hedge_delay = absl::Milliseconds(-1); }, "hedge_delay"},
      {[](ClientOptions& o) { o.block_time = absl::Microseconds(-1); }, "block_time"},
      {[](ClientOptions& o) { o.max_reconnect_backoff = absl::ZeroDuration(); },
       "max_reconnect_backoff"},
      {[](ClientOptions& o) {
         o.http2_bdp_probe = false;
         o.http2_window_bytes = 1000;
       },
       "http2_window_bytes"},
      {[](ClientOptions& o) { o.sequence_capacity = 0; }, "sequence_capacity"},
  };
  for (const Case& c : cases) {
    ClientOptions o = Good();
    c.change(o);
    const absl::Status s = o.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message_part;
    EXPECT_NE(s.message().find(c.message_part), std::string::npos) << s;
    // Create checks the options before it reads the (missing) manifest.
    const auto client = EngramClient::Create(o);
    EXPECT_EQ(client.status(), s);
  }
}

}  // namespace
}  // namespace engram
