// TLS, mutual TLS and bearer tokens on a real shard server (gRPC and the
// row stream), with certificates made at test time: every way in without
// the right credentials is refused with the right code, the client library
// gets every row right with them, and /metrics carries no row data.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/engram_client.h"
#include "common/net/socket_io.h"
#include "common/net/tls.h"
#include "common/testing/test_certs.h"
#include "engram/v1/engram_store.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/stream_wire.h"
#include "proto/wire.h"
#include "service/auth.h"
#include "service/shard_server.h"
#include "service/testing/server_test_util.h"

namespace engram {
namespace {

constexpr char kDataToken[] = "data-token-0123456789abcdef";
constexpr char kAdminToken[] = "admin-token-0123456789abcdef";

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new testing::TempDir("security_test");
    absl::StatusOr<testing::SmallShardedTable> t = testing::MakeSmallShardedTable(
        root_->Sub("table"), 1, [](uint32_t) { return root_->Sub("shard"); });
    ASSERT_TRUE(t.ok()) << t.status();
    map_ = new ShardMap(std::move(t->map));
    table_ = t->table.release();
    absl::StatusOr<testing::TestCerts> certs = testing::MakeTestCerts(root_->path());
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new testing::TestCerts(*certs);
    std::ofstream(root_->Sub("token")) << kDataToken << "\n";
    std::ofstream(root_->Sub("admin-token")) << kAdminToken << "\n";

    ShardServerOptions o;
    o.db_dir = root_->Sub("shard");
    // gRPC on 127.0.0.2, /metrics on 127.0.0.1 only: the two stay apart.
    o.listen = "127.0.0.2:0";
    o.metrics_port = 0;
    o.metrics_host = "127.0.0.1";
    o.tls_cert_file = certs_->server_cert;
    o.tls_key_file = certs_->server_key;
    o.tls_ca_file = certs_->ca_cert;
    o.auth_token_file = root_->Sub("token");
    o.admin_token_file = root_->Sub("admin-token");
    o.ram_budget_bytes = 32 << 10;  // RocksDB's index, a few rows: most rows from RocksDB
    absl::StatusOr<std::unique_ptr<ShardServer>> server = ShardServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete certs_;
    delete table_;
    delete map_;
    delete root_;
  }

  static std::string Address() { return absl::StrCat("127.0.0.2:", server_->port()); }

  // A gRPC channel with TLS, presenting `cert` (none when empty).
  static std::shared_ptr<grpc::Channel> TlsChannel(const std::string& cert, const std::string& key,
                                                   const std::string& ca = "") {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = testing::ReadFile(ca.empty() ? certs_->ca_cert : ca);
    if (!cert.empty()) {
      ssl.pem_cert_chain = testing::ReadFile(cert);
      ssl.pem_private_key = testing::ReadFile(key);
    }
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return grpc::CreateCustomChannel(Address(), grpc::SslCredentials(ssl), args);
  }
  static std::shared_ptr<grpc::Channel> GoodChannel() {
    return TlsChannel(certs_->client_cert, certs_->client_key);
  }

  static grpc::Status Info(grpc::Channel& channel, const std::string& token,
                           v1::InfoResponse* info = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    v1::InfoResponse ignored;
    return v1::EngramStore::NewStub(std::shared_ptr<grpc::Channel>(&channel, [](auto*) {}))
        ->Info(&context, v1::InfoRequest(), info != nullptr ? info : &ignored);
  }
  static grpc::Status Lookup(grpc::Channel& channel, const std::string& token) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    v1::LookupRequest request;
    request.set_table(map_->table);
    request.set_version(map_->version);
    v1::LayerRows* layer = request.add_layers();
    layer->set_layer(0);
    layer->add_row_ids(1);
    v1::LookupResponse response;
    return v1::EngramStore::NewStub(std::shared_ptr<grpc::Channel>(&channel, [](auto*) {}))
        ->Lookup(&context, request, &response);
  }

  // A TCP connection to the row stream, after the TLS handshake with
  // `files` (a client context).
  struct RawStream {
    int fd = -1;
    std::unique_ptr<TlsSession> tls;
    ~RawStream() {
      if (fd >= 0) ::close(fd);
    }
  };
  static absl::StatusOr<std::unique_ptr<RawStream>> ConnectStream(const TlsFiles& files) {
    auto stream = std::make_unique<RawStream>();
    absl::StatusOr<int> fd = ConnectTcp("127.0.0.2", server_->stream_port(), absl::Seconds(5));
    if (!fd.ok()) return fd.status();
    stream->fd = *fd;
    absl::StatusOr<std::shared_ptr<TlsContext>> context = TlsContext::Client(files);
    if (!context.ok()) return context.status();
    absl::StatusOr<std::unique_ptr<TlsSession>> tls =
        TlsSession::Handshake(**context, *fd, "127.0.0.1", absl::Seconds(5));
    if (!tls.ok()) return tls.status();
    stream->tls = std::move(*tls);
    return stream;
  }
  // Sends a hello with `token` and reads the server's hello; then the
  // connection's error, if the server sends one before closing
  // (OkStatus when the stream stays open: a request then gets an answer).
  static absl::Status StreamHello(RawStream& s, const std::string& token) {
    uint8_t hello[stream::kHelloBytes];
    stream::EncodeHello(stream::kVersion, hello, static_cast<uint32_t>(token.size()));
    iovec iov[2] = {{hello, sizeof(hello)}, {const_cast<char*>(token.data()), token.size()}};
    std::vector<uint8_t> records;
    if (!s.tls->Seal(iov, 2, &records)) return absl::InternalError("seal");
    iovec out = {records.data(), records.size()};
    if (!WriteFull(s.fd, &out, 1)) return absl::InternalError("write");
    if (!s.tls->ReadFull(hello, sizeof(hello))) return absl::UnavailableError("no hello");
    // One Lookup of row 1 of layer 0, to see whether the stream serves.
    const uint64_t row = 1;
    const wire::LayerRowIds layer{0, std::span<const uint64_t>(&row, 1)};
    grpc::Slice request = wire::EncodeLookupRequest(map_->table, map_->version, {&layer, 1});
    uint8_t head[stream::kHeaderBytes];
    stream::EncodeHeader({7, stream::kLookup, request.size()}, head);
    iovec frame[2] = {{head, sizeof(head)},
                      {const_cast<uint8_t*>(request.begin()), request.size()}};
    records.clear();
    s.tls->Seal(frame, 2, &records);
    out = {records.data(), records.size()};
    (void)WriteFull(s.fd, &out, 1);  // fails once the server has closed
    if (!s.tls->ReadFull(head, sizeof(head))) return absl::UnavailableError("closed");
    const stream::FrameHeader h = stream::DecodeHeader(head);
    std::string payload(h.payload_bytes, '\0');
    if (!s.tls->ReadFull(payload.data(), payload.size())) return absl::UnavailableError("short");
    if (h.word == 0) return h.id == 7 ? absl::OkStatus() : absl::InternalError("wrong id");
    return absl::Status(
        static_cast<absl::StatusCode>(h.word),
        absl::StrCat(h.id == stream::kConnectionError ? "connection: " : "", payload));
  }

  static ClientOptions Client() {
    ClientOptions o;
    o.table_dir = root_->Sub("table");
    o.shard_map_path = root_->Sub("shard/shard_map.json");
    o.shard_addresses = {{Address()}};
    o.tls_ca_file = certs_->ca_cert;
    o.tls_cert_file = certs_->client_cert;
    o.tls_key_file = certs_->client_key;
    o.tls_server_name = "localhost";
    o.auth_token = kDataToken;
    return o;
  }

  static testing::TempDir* root_;
  static ShardMap* map_;
  static TableReader* table_;
  static testing::TestCerts* certs_;
  static ShardServer* server_;
};

testing::TempDir* SecurityTest::root_ = nullptr;
ShardMap* SecurityTest::map_ = nullptr;
TableReader* SecurityTest::table_ = nullptr;
testing::TestCerts* SecurityTest::certs_ = nullptr;
ShardServer* SecurityTest::server_ = nullptr;

TEST_F(SecurityTest, RightCertificateAndTokenAreServed) {
  v1::InfoResponse info;
  const grpc::Status s = Info(*GoodChannel(), kDataToken, &info);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.table(), map_->table);
  EXPECT_EQ(info.stream_port(), static_cast<uint32_t>(server_->stream_port()));
  EXPECT_TRUE(Lookup(*GoodChannel(), kDataToken).ok());
  // The admin token may make data calls too.
  EXPECT_TRUE(Info(*GoodChannel(), kAdminToken).ok());
}

TEST_F(SecurityTest, NoTokenOrWrongTokenIsUnauthenticated) {
  auto channel = GoodChannel();
  for (const std::string token : {"", "not-the-token-0123456789"}) {
    const grpc::Status info = Info(*channel, token);
    EXPECT_EQ(info.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    const grpc::Status lookup = Lookup(*channel, token);
    EXPECT_EQ(lookup.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
    EXPECT_TRUE(absl::StrContains(lookup.error_message(), "token")) << lookup.error_message();
  }
  // Not "Bearer ...".
  grpc::ClientContext context;
  context.AddMetadata("authorization", std::string("Basic ") + kDataToken);
  v1::InfoResponse info;
  const grpc::Status basic = v1::EngramStore::NewStub(channel)->Info(&context, {}, &info);
  EXPECT_EQ(basic.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(SecurityTest, RefusedClientCertificatesGetNoCall) {
  // Expired, signed by another CA, or none at all (mutual TLS).
  for (const auto& [cert, key] : {std::pair{certs_->expired_cert, certs_->expired_key},
                                  std::pair{certs_->stranger_cert, certs_->stranger_key},
                                  std::pair{std::string(), std::string()}}) {
    const grpc::Status s = Info(*TlsChannel(cert, key), kDataToken);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << cert << ": " << s.error_message();
  }
  // The row stream refuses them in its handshake (TLS 1.3 clients learn it
  // from the server's alert at their first read: no hello comes back).
  for (const auto& [cert, key] : {std::pair{certs_->expired_cert, certs_->expired_key},
                                  std::pair{certs_->stranger_cert, certs_->stranger_key}}) {
    absl::StatusOr<std::unique_ptr<RawStream>> s = ConnectStream({cert, key, certs_->ca_cert});
    if (!s.ok()) {
      EXPECT_TRUE(s.status().code() == absl::StatusCode::kUnauthenticated ||
                  s.status().code() == absl::StatusCode::kUnavailable)
          << s.status();
      continue;
    }
    EXPECT_FALSE(StreamHello(**s, kDataToken).ok()) << cert;
  }
}

TEST_F(SecurityTest, ServerCertificateIsChecked) {
  // A client trusting another CA refuses the server.
  const grpc::Status s =
      Info(*TlsChannel(certs_->client_cert, certs_->client_key, certs_->other_ca_cert), kDataToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  absl::StatusOr<std::unique_ptr<RawStream>> stream =
      ConnectStream({certs_->client_cert, certs_->client_key, certs_->other_ca_cert});
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kUnauthenticated) << stream.status();
  EXPECT_TRUE(absl::StrContains(stream.status().message(), "certificate")) << stream.status();
}

TEST_F(SecurityTest, PlaintextToTlsPortsIsRefused) {
  auto plain = grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(Info(*plain, kDataToken).error_code(), grpc::StatusCode::UNAVAILABLE);
  // A plaintext hello on the row stream gets no hello back.
  absl::StatusOr<int> fd = ConnectTcp("127.0.0.2", server_->stream_port(), absl::Seconds(5));
  ASSERT_TRUE(fd.ok());
  uint8_t hello[stream::kHelloBytes];
  stream::EncodeHello(stream::kVersion, hello);
  iovec iov = {hello, sizeof(hello)};
  ASSERT_TRUE(WriteFull(*fd, &iov, 1));
  uint8_t answer[stream::kHelloBytes] = {};
  if (ReadFull(*fd, answer, sizeof(answer))) {
    EXPECT_FALSE(stream::DecodeHello(answer).ok());  // a TLS alert, not a hello
    EXPECT_TRUE(absl::StrContains(stream::DecodeHello(answer).status().message(), "TLS"));
  }
  ::close(*fd);
}

TEST_F(SecurityTest, RowStreamHelloNeedsTheToken) {
  const TlsFiles good = {certs_->client_cert, certs_->client_key, certs_->ca_cert};
  for (const std::string token : {"", "not-the-token-0123456789"}) {
    absl::StatusOr<std::unique_ptr<RawStream>> s = ConnectStream(good);
    ASSERT_TRUE(s.ok()) << s.status();
    const absl::Status answer = StreamHello(**s, token);
    EXPECT_EQ(answer.code(), absl::StatusCode::kUnauthenticated) << answer;
    EXPECT_TRUE(absl::StartsWith(answer.message(), "connection: ")) << answer;
  }
  absl::StatusOr<std::unique_ptr<RawStream>> s = ConnectStream(good);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(StreamHello(**s, kDataToken).ok());
}

TEST_F(SecurityTest, ClientReadsEveryRowOverTlsWithItsToken) {
  absl::StatusOr<std::unique_ptr<EngramClient>> client = EngramClient::Create(Client());
  ASSERT_TRUE(client.ok()) << client.status();
  std::unique_ptr<Sequence> seq = (*client)->NewSequence();
  Sequence* ptr = seq.get();
  std::mt19937_64 rng(5);
  std::vector<int64_t> tokens(64);
  for (int64_t& t : tokens) t = static_cast<int64_t>(rng() % 200);
  const std::vector<int64_t> start = {0};
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<Step> step = (*client)->Prefetch({std::span(&ptr, 1), start, 64, tokens, {}});
    ASSERT_TRUE(step.ok()) << step.status();
    const int L = (*client)->n_layers(), C = (*client)->n_cols();
    for (int l = 0; l < L; ++l) {
      const size_t row_bytes = map_->row_bytes[l];
      std::vector<uint8_t> out(64 * C * row_bytes);
      ASSERT_TRUE(step->Wait(l, RowFormat::kRaw, out).ok());
      std::vector<uint64_t> ids;
      for (int64_t p = 0; p < 64; ++p) {
        for (int c = 0; c < C; ++c) ids.push_back(step->row_ids()[(p * L + l) * C + c]);
      }
      EXPECT_EQ(std::string(out.begin(), out.end()), testing::ExpectedRows(*table_, l, ids));
    }
  }
  const ClientStats stats = (*client)->stats();
  EXPECT_GT(stats.stream_answers, 0u) << "the row stream over TLS answered nothing";
  EXPECT_EQ(stats.failed_rpcs, 0u);
}

TEST_F(SecurityTest, ClientWithoutTheTokenFailsUnauthenticated) {
  for (const std::string token : {"", "not-the-token-0123456789"}) {
    ClientOptions o = Client();
    o.auth_token = token;
    o.rpc_deadline = absl::Seconds(1);
    absl::StatusOr<std::unique_ptr<EngramClient>> client = EngramClient::Create(o);
    ASSERT_TRUE(client.ok()) << client.status();
    std::unique_ptr<Sequence> seq = (*client)->NewSequence();
    Sequence* ptr = seq.get();
    const std::vector<int64_t> tokens = {1, 2, 3}, start = {0};
    absl::StatusOr<Step> step = (*client)->Prefetch({std::span(&ptr, 1), start, 3, tokens, {}});
    ASSERT_TRUE(step.ok()) << step.status();
    std::vector<uint8_t> out(3 * (*client)->n_cols() * map_->row_bytes[0]);
    const absl::Status s = step->Wait(0, RowFormat::kRaw, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  }
}

TEST_F(SecurityTest, MetricsStayOnLocalhostAndCarryNoRows) {
  // The metrics socket listens on 127.0.0.1 only; gRPC on 127.0.0.2.
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  bool metrics_local = false;
  while (std::getline(tcp, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() > 3 && f[3] == "0A" &&
        absl::EqualsIgnoreCase(
            f[1], absl::StrCat("0100007F:", absl::Hex(server_->metrics_port(), absl::kZeroPad4)))) {
      metrics_local = true;
    }
  }
  EXPECT_TRUE(metrics_local) << "no listener on 127.0.0.1:" << server_->metrics_port();
  // Serve some rows, then read the page: every sample is a number with
  // labels from a fixed vocabulary.
  ASSERT_TRUE(Lookup(*GoodChannel(), kDataToken).ok());
  absl::StatusOr<std::string> page = testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  // A page Prometheus accepts as it is.
  const std::optional<std::string> lint = testing::PromtoolCheckMetrics(*page);
  if (lint.has_value()) {
    EXPECT_EQ(*lint, "") << *page;
  }
  const std::set<std::string> label_names = {"method", "code", "layer",    "tier",    "part",
                                             "kind",   "le",   "quantile", "encoding"};
  int samples = 0;
  for (absl::string_view l : absl::StrSplit(*page, '\n', absl::SkipEmpty())) {
    if (l[0] == '#') continue;
    ++samples;
    const size_t space = l.rfind(' ');
    ASSERT_NE(space, absl::string_view::npos) << l;
    double value;
    EXPECT_TRUE(absl::SimpleAtod(l.substr(space + 1), &value)) << l;
    const size_t brace = l.find('{');
    if (brace == absl::string_view::npos || brace > space) continue;
    for (absl::string_view pair :
         absl::StrSplit(l.substr(brace + 1, l.find('}') - brace - 1), ',', absl::SkipEmpty())) {
      const std::string name(pair.substr(0, pair.find('=')));
      EXPECT_TRUE(label_names.count(name)) << "label " << name << " in " << l;
      EXPECT_LE(pair.size(), 48u) << l;  // no row bytes in a label value
    }
  }
  EXPECT_GT(samples, 10);
}

TEST(TokenAuthTest, FilesAreChecked) {
  testing::TempDir dir("token_auth_test");
  std::ofstream(dir.Sub("short")) << "abc\n";
  std::ofstream(dir.Sub("empty")) << "\n";
  std::ofstream(dir.Sub("good")) << "  0123456789abcdef0123  \n";
  for (const char* bad : {"short", "empty", "absent"}) {
    absl::StatusOr<TokenAuth> a = TokenAuth::FromFiles(dir.Sub(bad), "");
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(a.status().message(), dir.Sub(bad))) << a.status();
  }
  // The same token for both roles is refused.
  EXPECT_FALSE(TokenAuth::FromFiles(dir.Sub("good"), dir.Sub("good")).ok());
  absl::StatusOr<TokenAuth> a = TokenAuth::FromFiles(dir.Sub("good"), "");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->Check("0123456789abcdef0123", Role::kData).ok());  // blanks trimmed
  EXPECT_EQ(a->Check("0123456789abcdef0123", Role::kAdmin).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(a->Check("0123456789abcdef012", Role::kData).code(),
            absl::StatusCode::kUnauthenticated);
  // No tokens: data open, admin open too (nothing to protect it with).
  EXPECT_TRUE(TokenAuth().Check("", Role::kData).ok());
  EXPECT_TRUE(TokenAuth().Check("", Role::kAdmin).ok());
}

}  // namespace
}  // namespace engram
