// AdminService: engram.v1.EngramAdmin of a shard server (internal to
// service/): Activate, behind the admin token (service/auth.h).
//
// Thread-safe; the server and the auth must outlive the service.
#ifndef ENGRAM_SERVICE_ADMIN_SERVICE_H_
#define ENGRAM_SERVICE_ADMIN_SERVICE_H_

#include "engram/v1/engram_store.grpc.pb.h"
#include "service/auth.h"

namespace engram {

class ShardServer;

class AdminService final : public v1::EngramAdmin::Service {
 public:
  AdminService(ShardServer* server, const TokenAuth* auth) : server_(server), auth_(auth) {}

  // Synchronous: a switch opens a table and builds its hot tier, which may
  // take a while; it runs on gRPC's synchronous threads, never on the
  // Lookup path.
  grpc::Status Activate(grpc::ServerContext* context, const v1::ActivateRequest* request,
                        v1::ActivateResponse* response) override;

 private:
  ShardServer* const server_;
  const TokenAuth* const auth_;
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_ADMIN_SERVICE_H_
