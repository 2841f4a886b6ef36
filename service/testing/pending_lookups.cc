#include "service/testing/pending_lookups.h"

#include <utility>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "proto/wire.h"
#include "service/testing/server_test_util.h"

namespace engram::testing {

struct PendingLookups::Call {
  grpc::ClientContext context;
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
};

PendingLookups::PendingLookups(int port, const grpc::ByteBuffer& request, int n)
    : channel_(LocalChannel(port)),
      stub_(std::make_unique<grpc::GenericStub>(channel_)),
      request_(request) {
  for (int i = 0; i < n; ++i) {
    calls_.push_back(std::make_unique<Call>());
    Call* c = calls_.back().get();
    stub_->UnaryCall(&c->context, "/engram.v1.EngramStore/Lookup", grpc::StubOptions(), &request_,
                     &c->response, [c](grpc::Status s) {
                       c->status = std::move(s);
                       c->done.Notify();
                     });
  }
}

PendingLookups::~PendingLookups() {
  for (auto& c : calls_) c->done.WaitForNotification();
}

bool PendingLookups::AllInFlight(int metrics_port) {
  const double want = static_cast<double>(calls_.size());
  for (int i = 0; i < 2000; ++i) {
    absl::StatusOr<std::string> page = HttpGet(metrics_port, "/metrics");
    if (!page.ok()) return false;
    if (MetricValue(*page, "engram_shard_inflight_requests").value_or(0) >= want) {
      return true;
    }
  }
  return false;
}

void PendingLookups::ExpectEveryRowsEqual(const std::string& expected) {
  std::string rows(expected.size(), '\0');
  for (auto& c : calls_) {
    c->done.WaitForNotification();
    ASSERT_TRUE(c->status.ok()) << c->status.error_message();
    ASSERT_TRUE(wire::DecodeLookupResponse(c->response,
                                           {reinterpret_cast<uint8_t*>(rows.data()), rows.size()})
                    .ok());
    EXPECT_TRUE(rows == expected);
  }
}

void PendingLookups::CountOkAndRefused(const std::string& expected, grpc::StatusCode code, int* ok,
                                       int* refused) {
  *ok = *refused = 0;
  std::string rows(expected.size(), '\0');
  for (auto& c : calls_) {
    c->done.WaitForNotification();
    if (c->status.error_code() == code) {
      ++*refused;
      continue;
    }
    ASSERT_TRUE(c->status.ok()) << c->status.error_message();
    ASSERT_TRUE(wire::DecodeLookupResponse(c->response,
                                           {reinterpret_cast<uint8_t*>(rows.data()), rows.size()})
                    .ok());
    EXPECT_TRUE(rows == expected);
    ++*ok;
  }
}

}  // namespace engram::testing
