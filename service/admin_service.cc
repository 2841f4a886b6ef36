#include "service/admin_service.h"

#include <string>

#include "service/grpc_status.h"
#include "service/shard_server.h"

namespace engram {

grpc::Status AdminService::Activate(grpc::ServerContext* context,
                                    const v1::ActivateRequest* request,
                                    v1::ActivateResponse* response) {
  if (auth_ != nullptr) {
    const absl::Status allowed = auth_->CheckMetadata(context->client_metadata(), Role::kAdmin);
    if (!allowed.ok()) return ToGrpc(allowed);
  }
  if (request->version() == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "Activate needs the version to serve (1 or more)");
  }
  absl::StatusOr<ActivateResult> result = server_->Activate(request->version());
  if (!result.ok()) return ToGrpc(result.status());
  response->set_previous_version(result->previous_version);
  response->set_version(result->version);
  response->set_load_seconds(result->load_seconds);
  response->set_drain_seconds(result->drain_seconds);
  return grpc::Status::OK;
}

}  // namespace engram
