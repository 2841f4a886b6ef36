#include "tools/deploy_commands.h"

#include <cstdio>
#include <memory>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/time/time.h"
#include "common/format/shard_map.h"
#include "common/net/shard_addresses.h"
#include "common/net/tls.h"
#include "common/util/status_macros.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "service/auth.h"

ABSL_DECLARE_FLAG(std::string, shards);
ABSL_FLAG(std::string, from_dns, "",
          "shardmap: the headless Service of the Helm chart's shards, e.g. "
          "engram-store.engram.svc.cluster.local");
ABSL_FLAG(int32_t, replicas, 0, "shardmap: pods per shard (the chart's replicasPerShard)");
ABSL_FLAG(int32_t, port, 7070, "shardmap: the shard servers' gRPC port");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "info: deadline of the Info calls; activate: of each Activate (give a large hot "
          "tier its load time)");
ABSL_FLAG(std::string, auth_token_file, "",
          "info, lookup: file whose first line is the shards' data token (engram-shard "
          "--auth-token-file)");
ABSL_FLAG(std::string, tls_ca, "",
          "info, activate, lookup: the CA (PEM) of the shards' TLS certificates (engram-shard "
          "--tls-cert); empty = plaintext");
ABSL_FLAG(std::string, tls_cert, "",
          "info, activate, lookup: with --tls-key, the client certificate (PEM) for shards "
          "that require one (engram-shard --tls-ca)");
ABSL_FLAG(std::string, tls_key, "", "info, activate, lookup: the key (PEM) of --tls-cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "info, activate, lookup: the name the shards' certificates carry (default: each "
          "address's host)");
ABSL_FLAG(uint64_t, to_version, 0, "activate: the table version to switch to");
ABSL_FLAG(std::string, admin_token_file, "",
          "activate: file whose first line is the shards' admin token (engram-shard "
          "--admin-token-file)");

namespace engram {
namespace {

// The token of the file a flag names; "" when the flag is empty.
absl::StatusOr<std::string> OptionalToken(const absl::Flag<std::string>& flag, const char* what) {
  const std::string path = absl::GetFlag(flag);
  if (path.empty()) return std::string();
  return ReadTokenFile(path, what);
}

// Channel credentials from the --tls-* flags: TLS (mutual with --tls-cert)
// or, without --tls-ca, plaintext.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials() {
  const std::string ca = absl::GetFlag(FLAGS_tls_ca);
  const std::string cert = absl::GetFlag(FLAGS_tls_cert), key = absl::GetFlag(FLAGS_tls_key);
  if (ca.empty()) {
    if (!cert.empty() || !key.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key need --tls-ca, the shards' CA");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("give --tls-cert and --tls-key together, or neither");
  }
  grpc::SslCredentialsOptions ssl;
  ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPemFile(ca, "TLS CA (--tls-ca)"));
  if (!cert.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPemFile(cert, "client certificate (--tls-cert)"));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPemFile(key, "client key (--tls-key)"));
  }
  return grpc::SslCredentials(ssl);
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address,
                                       const std::shared_ptr<grpc::ChannelCredentials>& creds) {
  grpc::ChannelArguments args;
  const std::string name = absl::GetFlag(FLAGS_tls_server_name);
  if (!name.empty()) args.SetSslTargetNameOverride(name);
  return grpc::CreateCustomChannel(address, creds, args);
}

int Fail(absl::string_view command, absl::string_view line) {
  std::fprintf(stderr, "engramctl %s: %s\n", std::string(command).c_str(),
               std::string(line).c_str());
  return 2;
}

// One address's Info call.
struct InfoCall {
  std::string address;
  int shard = 0;  // its place in --shards
  grpc::ClientContext context;
  v1::InfoResponse response;
  grpc::Status status;
};

// "ADDR: shard I/K of table T vV, ..." for an answered call; appends what
// disagrees with the call's place in a deployment of `n_shards` shards and
// sets *wrong when something does.
std::string DescribeInfo(const InfoCall& call, size_t n_shards, bool* wrong) {
  const v1::InfoResponse& info = call.response;
  ShardMap map;
  map.n_shards = info.n_shards();
  map.layer_rows.assign(info.layer_rows().begin(), info.layer_rows().end());
  std::vector<uint64_t> own;
  for (uint32_t l = 0; l < map.layer_rows.size() && info.shard_index() < map.n_shards; ++l) {
    own.push_back(map.RowsOnShard(l, info.shard_index()));
  }
  std::string line = absl::StrCat(
      call.address, ": shard ", info.shard_index(), "/", info.n_shards(), " of table ",
      info.table(), " v", info.version(), ", rows ", absl::StrJoin(own, " "), " (per layer; table ",
      absl::StrJoin(map.layer_rows, " "), "), row bytes ", absl::StrJoin(info.row_bytes(), " "),
      info.encoding().empty() ? "" : absl::StrCat(" (", absl::StrJoin(info.encoding(), " "), ")"),
      ", hot tier ", info.hot_bytes(), " bytes, ",
      info.stream_port() == 0 ? "row stream off"
                              : absl::StrCat("row stream port ", info.stream_port()));
  if (info.shard_index() != static_cast<uint32_t>(call.shard) || info.n_shards() != n_shards) {
    *wrong = true;
    absl::StrAppend(&line, "; MISPLACED: --shards lists it as shard ", call.shard, "/", n_shards);
  }
  return line;
}

}  // namespace

int ShardMapCommand(const std::vector<std::string>& args) {
  constexpr char kCommand[] = "shardmap";
  if (!args.empty()) return Fail(kCommand, absl::StrCat("takes flags only, not '", args[0], "'"));
  const std::string service = absl::GetFlag(FLAGS_from_dns);
  if (service.empty()) {
    return Fail(kCommand,
                "needs --from-dns SERVICE, the shards' headless Service (e.g. "
                "engram-store.engram.svc.cluster.local)");
  }
  int32_t shards = 0;
  const std::string shards_text = absl::GetFlag(FLAGS_shards);
  if (!absl::SimpleAtoi(shards_text, &shards) || shards < 1) {
    return Fail(kCommand, absl::StrCat("needs --shards K with K >= 1, the number of shards "
                                       "(the chart's shards; got '",
                                       shards_text, "')"));
  }
  const int32_t replicas = absl::GetFlag(FLAGS_replicas);
  if (replicas < 1) {
    return Fail(kCommand, absl::StrCat("needs --replicas R with R >= 1, the pods per shard "
                                       "(the chart's replicasPerShard; got ",
                                       replicas, ")"));
  }
  absl::StatusOr<std::vector<std::vector<std::string>>> addresses =
      ShardAddressesFromDns(service, shards, replicas, absl::GetFlag(FLAGS_port));
  if (!addresses.ok()) return Fail(kCommand, addresses.status().message());
  std::printf("%s\n", FormatShardAddresses(*addresses).c_str());
  return 0;
}

int ActivateCommand(const std::vector<std::string>& args) {
  constexpr char kCommand[] = "activate";
  if (!args.empty()) return Fail(kCommand, absl::StrCat("takes flags only, not '", args[0], "'"));
  const uint64_t version = absl::GetFlag(FLAGS_to_version);
  if (version == 0) {
    return Fail(kCommand, "needs --to-version N, the table version to serve (imported as vN)");
  }
  const std::string text = absl::GetFlag(FLAGS_shards);
  if (text.empty()) return Fail(kCommand, "needs --shards ADDRS (engramctl shardmap prints them)");
  absl::StatusOr<std::vector<std::vector<std::string>>> shards = ParseShardAddresses(text);
  if (!shards.ok()) return Fail(kCommand, absl::StrCat("--shards: ", shards.status().message()));
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) {
    return Fail(kCommand, absl::StrCat("--timeout ", absl::FormatDuration(timeout),
                                       " is not positive; give a deadline such as 5m"));
  }
  absl::StatusOr<std::string> token = OptionalToken(FLAGS_admin_token_file, "admin token");
  if (!token.ok()) return Fail(kCommand, token.status().message());
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = Credentials();
  if (!creds.ok()) return Fail(kCommand, creds.status().message());
  // One replica at a time, shard by shard: the others serve meanwhile. The
  // first failure stops the roll, so what is left keeps its version.
  for (const std::vector<std::string>& replicas : *shards) {
    for (const std::string& address : replicas) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      if (!token->empty()) context.AddMetadata("authorization", "Bearer " + *token);
      v1::ActivateRequest request;
      request.set_version(version);
      v1::ActivateResponse response;
      const grpc::Status status = v1::EngramAdmin::NewStub(Channel(address, *creds))
                                      ->Activate(&context, request, &response);
      if (!status.ok()) {
        const auto code = static_cast<absl::StatusCode>(status.error_code());
        std::printf("%s: %s: %s\n", address.c_str(), absl::StatusCodeToString(code).c_str(),
                    absl::StrReplaceAll(status.error_message(), {{"\n", " "}}).c_str());
        return 1;
      }
      std::printf("%s: version %llu -> %llu (load %.2f s, drain %.2f s)\n", address.c_str(),
                  static_cast<unsigned long long>(response.previous_version()),
                  static_cast<unsigned long long>(response.version()), response.load_seconds(),
                  response.drain_seconds());
    }
  }
  return 0;
}

int InfoCommand(const std::vector<std::string>& args) {
  constexpr char kCommand[] = "info";
  if (!args.empty()) return Fail(kCommand, absl::StrCat("takes flags only, not '", args[0], "'"));
  const std::string text = absl::GetFlag(FLAGS_shards);
  if (text.empty()) {
    return Fail(kCommand,
                "needs --shards ADDRS (host:port per shard, shard 0 first, a|b for "
                "replicas; engramctl shardmap prints a Helm deployment's)");
  }
  absl::StatusOr<std::vector<std::vector<std::string>>> shards = ParseShardAddresses(text);
  if (!shards.ok()) return Fail(kCommand, absl::StrCat("--shards: ", shards.status().message()));
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  if (timeout <= absl::ZeroDuration()) {
    return Fail(kCommand, absl::StrCat("--timeout ", absl::FormatDuration(timeout),
                                       " is not positive; give a deadline such as 5s"));
  }
  absl::StatusOr<std::string> token = OptionalToken(FLAGS_auth_token_file, "auth token");
  if (!token.ok()) return Fail(kCommand, token.status().message());
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = Credentials();
  if (!creds.ok()) return Fail(kCommand, creds.status().message());

  // Every call at once, all within one deadline.
  const std::chrono::system_clock::time_point deadline = absl::ToChronoTime(absl::Now() + timeout);
  std::vector<std::unique_ptr<InfoCall>> calls;
  std::vector<std::unique_ptr<v1::EngramStore::Stub>> stubs;
  for (size_t s = 0; s < shards->size(); ++s) {
    for (const std::string& address : (*shards)[s]) {
      auto call = std::make_unique<InfoCall>();
      call->address = address;
      call->shard = static_cast<int>(s);
      call->context.set_deadline(deadline);
      if (!token->empty()) call->context.AddMetadata("authorization", "Bearer " + *token);
      calls.push_back(std::move(call));
      stubs.push_back(v1::EngramStore::NewStub(Channel(address, *creds)));
    }
  }
  const v1::InfoRequest request;
  absl::BlockingCounter done(static_cast<int>(calls.size()));
  for (size_t i = 0; i < calls.size(); ++i) {
    InfoCall* call = calls[i].get();
    stubs[i]->async()->Info(&call->context, &request, &call->response,
                            [call, &done](grpc::Status status) {
                              call->status = std::move(status);
                              done.DecrementCount();
                            });
  }
  done.Wait();

  bool wrong = false;
  for (const std::unique_ptr<InfoCall>& call : calls) {
    if (call->status.ok()) {
      std::printf("%s\n", DescribeInfo(*call, shards->size(), &wrong).c_str());
      continue;
    }
    wrong = true;
    const auto code = static_cast<absl::StatusCode>(call->status.error_code());
    std::printf("%s: %s: %s\n", call->address.c_str(), absl::StatusCodeToString(code).c_str(),
                absl::StrReplaceAll(call->status.error_message(), {{"\n", " "}}).c_str());
  }
  return wrong ? 1 : 0;
}

}  // namespace engram
