// The gRPC status of an absl::Status (internal to service/): the same code
// (absl and gRPC share the canonical numbering) and message.
#ifndef ENGRAM_SERVICE_GRPC_STATUS_H_
#define ENGRAM_SERVICE_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace engram {

inline grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace engram

#endif  // ENGRAM_SERVICE_GRPC_STATUS_H_
