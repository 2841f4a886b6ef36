#include "service/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace engram {

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read the ", what, " file ", path));
  }
  std::string line;
  std::getline(in, line);
  const std::string token(absl::StripAsciiWhitespace(line));
  if (token.size() < TokenAuth::kMinTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", what, " file ", path, " holds ",
        token.empty() ? "no token"
                      : "a token of only " + std::to_string(token.size()) + " characters",
        " (put a random token of at least ", TokenAuth::kMinTokenBytes,
        " characters on its first line, e.g. from `openssl rand -hex 32`)"));
  }
  return token;
}

TokenAuth::Digest TokenAuth::Hash(absl::string_view token) {
  Digest d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

absl::StatusOr<TokenAuth> TokenAuth::FromFiles(const std::string& data_token_file,
                                               const std::string& admin_token_file) {
  TokenAuth auth;
  if (!data_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(data_token_file, "auth token");
    if (!token.ok()) return token.status();
    auth.data_ = Hash(*token);
  }
  if (!admin_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(admin_token_file, "admin token");
    if (!token.ok()) return token.status();
    auth.admin_ = Hash(*token);
    if (auth.data_.has_value() && CRYPTO_memcmp(auth.data_->data(), auth.admin_->data(), 32) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("the admin token file ", admin_token_file,
                                                     " holds the data token of ", data_token_file,
                                                     ": admin RPCs need a token of their own"));
    }
  }
  return auth;
}

absl::Status TokenAuth::Check(absl::string_view token, Role role) const {
  if (!admin_protected()) return absl::OkStatus();  // no tokens at all
  if (role == Role::kData && !data_protected()) return absl::OkStatus();
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "this shard requires a bearer token (gRPC metadata `authorization: Bearer <token>`; "
        "ClientOptions::auth_token)");
  }
  const Digest presented = Hash(token);
  const bool is_admin =
      admin_.has_value() && CRYPTO_memcmp(presented.data(), admin_->data(), presented.size()) == 0;
  const bool is_data =
      data_.has_value() && CRYPTO_memcmp(presented.data(), data_->data(), presented.size()) == 0;
  if (is_admin || (is_data && role == Role::kData)) return absl::OkStatus();
  if (is_data) {
    return absl::PermissionDeniedError(
        admin_.has_value() ? "the data token cannot call admin RPCs: use the admin token"
                           : "admin RPCs are off on this shard (no --admin-token-file)");
  }
  return absl::UnauthenticatedError("the bearer token is not one this shard accepts");
}

absl::Status TokenAuth::CheckMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata, Role role) const {
  if (!admin_protected() || (role == Role::kData && !data_protected())) return absl::OkStatus();
  absl::string_view token;
  auto it = metadata.find("authorization");
  if (it != metadata.end()) {
    absl::string_view value(it->second.data(), it->second.size());
    if (absl::StartsWithIgnoreCase(value, "bearer ")) {
      token = absl::StripAsciiWhitespace(value.substr(7));
    } else {
      return absl::UnauthenticatedError("the authorization metadata is not `Bearer <token>`");
    }
  }
  return Check(token, role);
}

}  // namespace engram
