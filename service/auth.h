// TokenAuth: the bearer tokens a shard server accepts (--auth-token-file,
// --admin-token-file).
//
// A data token lets a caller use the data RPCs (Lookup, Info, the row
// stream); the admin token lets it use the admin RPCs as well. A caller
// with no token, or one that matches neither, is refused with
// UNAUTHENTICATED; one with the data token calling an admin RPC with
// PERMISSION_DENIED. Tokens are compared in constant time (their SHA-256
// digests, so neither content nor length leaks through timing). The
// health service stays open, for the kubelet's probes.
//
// gRPC callers send `authorization: Bearer <token>`; the row stream carries
// the token in its hello (proto/stream_wire.h). Immutable after creation;
// thread-safe.
#ifndef ENGRAM_SERVICE_AUTH_H_
#define ENGRAM_SERVICE_AUTH_H_

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/string_ref.h"

namespace engram {

enum class Role { kData, kAdmin };

// The token in a token file: its first line, surrounding blanks trimmed.
// InvalidArgument naming the file (`what`: "auth token", "admin token")
// when it cannot be read, is empty, or holds fewer than 16 characters.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const char* what);

class TokenAuth {
 public:
  // No tokens: every call is let through.
  TokenAuth() = default;
  // Reads the tokens (each file's first line, surrounding blanks trimmed).
  // Either path may be empty: with neither, every call is let through;
  // with only an admin token, data RPCs are open and admin RPCs need it;
  // with only a data token, admin RPCs are refused to everyone. InvalidArgument
  // naming the file when it cannot be read, is empty, or holds a token
  // shorter than kMinTokenBytes.
  static absl::StatusOr<TokenAuth> FromFiles(const std::string& data_token_file,
                                             const std::string& admin_token_file);
  static constexpr size_t kMinTokenBytes = 16;

  // Whether data (or admin) calls need a token at all.
  bool data_protected() const { return data_.has_value(); }
  bool admin_protected() const { return data_.has_value() || admin_.has_value(); }

  // OK when `token` (what the caller presented, "" for none) may make a
  // call of `role`; else Unauthenticated or PermissionDenied with a message
  // saying what to send.
  absl::Status Check(absl::string_view token, Role role) const;
  // The same for a gRPC call's metadata ("authorization: Bearer <token>").
  absl::Status CheckMetadata(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                             Role role) const;

 private:
  using Digest = std::array<uint8_t, 32>;
  static Digest Hash(absl::string_view token);
  std::optional<Digest> data_;
  std::optional<Digest> admin_;
};

}  // namespace engram

#endif  // ENGRAM_SERVICE_AUTH_H_
