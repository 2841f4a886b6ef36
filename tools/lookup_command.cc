#include "tools/lookup_command.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/engram_client.h"
#include "common/net/shard_addresses.h"
#include "service/auth.h"

ABSL_DECLARE_FLAG(std::string, table);
ABSL_DECLARE_FLAG(std::string, shards);
ABSL_DECLARE_FLAG(std::string, auth_token_file);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_FLAG(std::string, tokens, "", "lookup: token ids, space-separated (one fresh sequence)");
ABSL_FLAG(bool, json, false, "lookup: print one JSON array with every row's values");
ABSL_FLAG(int32_t, values, 4, "lookup: values of each row shown in the text output");
ABSL_FLAG(absl::Duration, rpc_deadline, absl::Seconds(30),
          "lookup: deadline of each RPC attempt, a shard's connection included (a one-shot "
          "command waits longer than a worker's 2 s; the step has no deadline of its own)");
ABSL_FLAG(std::string, shard_map, "",
          "lookup: the shard map (default: derived from the table and --shards)");

namespace engram {
namespace {

int Fail(const std::string& line) {
  std::fprintf(stderr, "engramctl: %s\n", line.c_str());
  return 2;
}

// Shortest text that reads back as the same float.
std::string FloatText(float v) {
  if (!std::isfinite(v)) return "null";
  // JSON readers take "-0" for the integer 0; "-0.0" keeps the sign.
  if (v == 0.0f && std::signbit(v)) return "-0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

}  // namespace

int LookupCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail("lookup takes flags only, not '" + args[0] + "'");
  ClientOptions o;
  o.table_dir = absl::GetFlag(FLAGS_table);
  o.shard_map_path = absl::GetFlag(FLAGS_shard_map);
  if (o.table_dir.empty()) return Fail("lookup needs --table DIR (the table's directory)");
  const std::string shards = absl::GetFlag(FLAGS_shards);
  if (shards.empty()) {
    return Fail("lookup needs --shards host:port,... (shard 0 first; a|b for replicas)");
  }
  absl::StatusOr<std::vector<std::vector<std::string>>> addresses = ParseShardAddresses(shards);
  if (!addresses.ok()) {
    return Fail(absl::StrCat("lookup: --shards: ", addresses.status().message()));
  }
  o.shard_addresses = *std::move(addresses);
  o.rpc_deadline = absl::GetFlag(FLAGS_rpc_deadline);
  o.step_deadline = absl::InfiniteDuration();
  o.tls_ca_file = absl::GetFlag(FLAGS_tls_ca);
  o.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  o.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file); !path.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(path, "auth token");
    if (!token.ok()) return Fail(absl::StrCat("lookup: ", token.status().message()));
    o.auth_token = *std::move(token);
  }
  std::vector<int64_t> tokens;
  for (absl::string_view t :
       absl::StrSplit(absl::GetFlag(FLAGS_tokens), absl::ByAnyChar(" \t,"), absl::SkipEmpty())) {
    int64_t id;
    if (!absl::SimpleAtoi(t, &id)) {
      return Fail(absl::StrCat("--tokens: '", t, "' is not a token id"));
    }
    tokens.push_back(id);
  }
  if (tokens.empty()) return Fail("lookup needs --tokens \"ID ID ...\" (at least one token id)");

  absl::StatusOr<std::unique_ptr<EngramClient>> client = EngramClient::Create(o);
  if (!client.ok()) return Fail(absl::StrCat("lookup: ", client.status().message()));
  EngramClient& c = **client;
  std::unique_ptr<Sequence> seq = c.NewSequence();
  Sequence* ptr = seq.get();
  const int64_t T = static_cast<int64_t>(tokens.size());
  const std::vector<int64_t> start = {0};
  absl::StatusOr<Step> step = c.Prefetch({std::span(&ptr, 1), start, T, tokens, {}});
  if (!step.ok()) return Fail(absl::StrCat("lookup: ", step.status().message()));

  const int L = c.n_layers(), C = c.n_cols();
  std::vector<std::vector<float>> values(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    values[l].resize(static_cast<size_t>(T * C * c.head_dim(l)));
    std::span<uint8_t> out(reinterpret_cast<uint8_t*>(values[l].data()),
                           values[l].size() * sizeof(float));
    if (absl::Status s = step->Wait(l, RowFormat::kF32, out); !s.ok()) {
      std::fprintf(stderr, "engramctl: lookup: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const bool json = absl::GetFlag(FLAGS_json);
  // --json also gives each row's stored bytes, in the layer's encoding.
  std::vector<std::vector<uint8_t>> raw(static_cast<size_t>(json ? L : 0));
  for (int l = 0; l < static_cast<int>(raw.size()); ++l) {
    raw[l].resize(static_cast<size_t>(T * C * c.row_bytes(l)));
    if (absl::Status s = step->Wait(l, RowFormat::kRaw, raw[l]); !s.ok()) {
      std::fprintf(stderr, "engramctl: lookup: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const std::span<const RowId> ids = step->row_ids();
  const int shown = std::max(0, absl::GetFlag(FLAGS_values));
  if (json) std::fputc('[', stdout);
  bool first = true;
  for (int64_t p = 0; p < T; ++p) {
    for (int l = 0; l < L; ++l) {
      const int hd = c.head_dim(l);
      for (int col = 0; col < C; ++col) {
        const RowId row = ids[(static_cast<size_t>(p) * L + l) * C + col];
        const float* v = &values[l][(static_cast<size_t>(p) * C + col) * hd];
        const int shard = static_cast<int>(row % static_cast<uint64_t>(c.n_shards()));
        if (json) {
          std::string line =
              absl::StrCat(first ? "" : ",", "\n{\"pos\":", p, ",\"layer\":", l, ",\"col\":", col,
                           ",\"row_id\":", row, ",\"shard\":", shard, ",\"encoding\":\"",
                           StoredEncodingName(c.encoding(l)), "\",\"bytes\":\"",
                           absl::BytesToHexString(absl::string_view(
                               reinterpret_cast<const char*>(raw[l].data()) +
                                   (static_cast<size_t>(p) * C + col) * c.row_bytes(l),
                               static_cast<size_t>(c.row_bytes(l)))),
                           "\",\"values\":[");
          for (int j = 0; j < hd; ++j) absl::StrAppend(&line, j ? "," : "", FloatText(v[j]));
          line += "]}";
          std::fputs(line.c_str(), stdout);
          first = false;
        } else {
          std::string line = absl::StrCat("pos ", p, " layer ", l, " (transformer layer ",
                                          c.layout().engram_layer_ids[l], ") col ", col, " row ",
                                          row, " shard ", shard, ":");
          for (int j = 0; j < std::min(shown, hd); ++j)
            absl::StrAppend(&line, " ", FloatText(v[j]));
          if (shown < hd) line += " ...";
          std::puts(line.c_str());
        }
      }
    }
  }
  if (json) std::fputs("\n]\n", stdout);
  // Which path answered (the row stream or gRPC), for whoever checks a
  // deployment's ports; stdout stays the rows alone.
  const ClientStats stats = c.stats();
  std::fprintf(stderr,
               "engramctl: lookup: %llu rows from %d shard(s) in %llu RPCs, %llu of them answered "
               "over the row stream\n",
               static_cast<unsigned long long>(stats.rows_fetched), c.n_shards(),
               static_cast<unsigned long long>(stats.rpcs),
               static_cast<unsigned long long>(stats.stream_answers));
  return 0;
}

}  // namespace engram
