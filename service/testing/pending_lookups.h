// PendingLookups: raw Lookup calls left in flight, for the drain tests of
// the in-process server (service/) and of the engram-shard process (tests/).
// Test-only: checks with GoogleTest assertions.
#ifndef ENGRAM_SERVICE_TESTING_PENDING_LOOKUPS_H_
#define ENGRAM_SERVICE_TESTING_PENDING_LOOKUPS_H_

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace engram::testing {

// Raw Lookup calls started together on one channel and left in flight, for
// tests of a server's drain on shutdown.
class PendingLookups {
 public:
  // Starts `n` calls of the serialized `request` to 127.0.0.1:`port`.
  PendingLookups(int port, const grpc::ByteBuffer& request, int n);
  ~PendingLookups();  // waits for any call still in flight

  // Scrapes /metrics on `metrics_port` until the server reports every call
  // in a handler (engram_shard_inflight_requests); false if it never does.
  bool AllInFlight(int metrics_port);
  // Waits for every call and checks that each returned OK with exactly
  // `expected` as its rows.
  void ExpectEveryRowsEqual(const std::string& expected);
  // Waits for every call; counts those that returned OK with exactly
  // `expected` as their rows (*ok) and those that failed with `code`
  // (*refused), and checks that no call did anything else.
  void CountOkAndRefused(const std::string& expected, grpc::StatusCode code, int* ok, int* refused);

 private:
  struct Call;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
  grpc::ByteBuffer request_;
  std::vector<std::unique_ptr<Call>> calls_;
};

}  // namespace engram::testing

#endif  // ENGRAM_SERVICE_TESTING_PENDING_LOOKUPS_H_
