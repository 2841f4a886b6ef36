// The standard gRPC services a shard server offers beside EngramStore:
// health checking and reflection, as grpc_health_probe and grpcurl use them.
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "service/shard_server.h"
#include "service/testing/server_test_util.h"

namespace engram {
namespace {

class GrpcServicesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("grpc_services_test");
    absl::StatusOr<testing::SmallShardedTable> t = testing::MakeSmallShardedTable(
        root_->path() + "/table", 1, [](uint32_t) { return root_->path() + "/shard"; });
    ASSERT_TRUE(t.ok()) << t.status();
  }
  static void TearDownTestSuite() { delete root_; }

  // A server of the one shard, every row from disk.
  static std::unique_ptr<ShardServer> Start() {
    ShardServerOptions options;
    options.listen = "127.0.0.1:0";
    options.db_dir = root_->path() + "/shard";
    auto server = ShardServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  static testing::TempDir* root_;
};

testing::TempDir* GrpcServicesTest::root_ = nullptr;

TEST_F(GrpcServicesTest, HealthServiceReportsServing) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  auto channel = testing::LocalChannel(server->port());
  for (const std::string service : {"", "engram.v1.EngramStore"}) {
    // HealthCheckRequest{service}; the reply HealthCheckResponse{SERVING=1}.
    std::string request;
    if (!service.empty()) request = absl::StrCat("\x0a", std::string(1, service.size()), service);
    grpc::ByteBuffer response;
    const grpc::Status s = testing::RawUnaryCall(*channel, "/grpc.health.v1.Health/Check",
                                                 testing::ToByteBuffer(request), &response);
    ASSERT_TRUE(s.ok()) << service << ": " << s.error_message();
    EXPECT_EQ(testing::ToString(response), std::string("\x08\x01", 2));
  }
}

TEST_F(GrpcServicesTest, ReflectionListsTheStoreService) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  grpc::GenericStub stub(testing::LocalChannel(server->port()));
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  // Starts one async operation with a tag and waits for its completion.
  auto step = [&cq](const std::function<void(void*)>& start) {
    int op;
    start(&op);
    void* tag = nullptr;
    bool ok = false;
    return cq.Next(&tag, &ok) && tag == &op && ok;
  };
  ASSERT_TRUE(step([&](void* tag) { call->StartCall(tag); }));
  // ServerReflectionRequest{list_services: ""} (field 7).
  const grpc::ByteBuffer request = testing::ToByteBuffer(std::string("\x3a\x00", 2));
  ASSERT_TRUE(step([&](void* tag) { call->Write(request, tag); }));
  grpc::ByteBuffer response;
  ASSERT_TRUE(step([&](void* tag) { call->Read(&response, tag); }));
  const std::string listed = testing::ToString(response);
  EXPECT_NE(listed.find("engram.v1.EngramStore"), std::string::npos);
  EXPECT_NE(listed.find("grpc.health.v1.Health"), std::string::npos);
  ASSERT_TRUE(step([&](void* tag) { call->WritesDone(tag); }));
  grpc::Status status;
  ASSERT_TRUE(step([&](void* tag) { call->Finish(&status, tag); }));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace engram
