// TLS for the row stream (proto/stream_wire.h), both ends, with OpenSSL.
//
// A TlsContext holds the certificates and the policy (TLS 1.2 or later;
// the peer verified against a CA; for a server with a client CA, a client
// certificate required). A TlsSession is one connection's TLS state over
// a connected TCP socket the caller keeps owning: after Handshake() the
// socket carries only TLS records, and the session turns plaintext into
// the records to send (Seal) and received records into plaintext (Read).
//
// The session never writes to the socket itself and reads from it only in
// Read(), so the row stream keeps its own threading: one reader thread,
// any number of writers that Seal under their own write lock and send the
// records in the order they were sealed. Seal and Read may run at once on
// two threads (an internal mutex serialises the OpenSSL calls, which never
// block: the session's I/O goes through memory buffers).
//
// Kernel TLS would let the socket encrypt itself after the handshake; the
// kernels this was built on lack it (CONFIG_TLS off), so records are made
// in user space (docs/reliability.md, "TLS").
#ifndef ENGRAM_COMMON_NET_TLS_H_
#define ENGRAM_COMMON_NET_TLS_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct bio_st BIO;

namespace engram {

struct TlsFiles {
  // PEM files. A server needs cert and key; ca, when set, is the CA its
  // clients' certificates must chain to (mutual TLS). A client needs ca
  // (the CA of the servers' certificates); cert and key, when set, are the
  // certificate it presents.
  std::string cert_file;
  std::string key_file;
  std::string ca_file;
};

// The PEM text of a file, for gRPC's credentials. NotFound / PermissionDenied
// naming the file; InvalidArgument when it holds no PEM block.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& what);

class TlsContext {
 public:
  // InvalidArgument naming the file and OpenSSL's reason for a missing,
  // unreadable or mismatched certificate or key.
  static absl::StatusOr<std::shared_ptr<TlsContext>> Server(const TlsFiles& files);
  static absl::StatusOr<std::shared_ptr<TlsContext>> Client(const TlsFiles& files);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  bool is_server() const { return server_; }
  SSL_CTX* ctx() const { return ctx_; }

 private:
  TlsContext(SSL_CTX* ctx, bool server) : ctx_(ctx), server_(server) {}
  SSL_CTX* const ctx_;
  const bool server_;
};

class TlsSession {
 public:
  // Runs the handshake over `fd` (blocking, at most `timeout`). A client
  // checks that the server's certificate names `peer_name` (a DNS name or
  // an IP address). Unauthenticated when the peer's certificate is refused
  // (expired, another CA, wrong name, none where one is required),
  // Unavailable when the peer is not speaking TLS or closes, DeadlineExceeded
  // at the timeout; each message says which.
  static absl::StatusOr<std::unique_ptr<TlsSession>> Handshake(const TlsContext& context, int fd,
                                                               const std::string& peer_name,
                                                               absl::Duration timeout);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Appends to `records` the TLS records carrying iov[0, n). Thread-safe;
  // REQUIRES: records sealed by different threads are sent in the order
  // of the Seal calls (hold the socket's write lock across both).
  bool Seal(const struct iovec* iov, int n, std::vector<uint8_t>* records);

  // Reads exactly n plaintext bytes, receiving records from the socket as
  // needed (blocking, with the socket's own timeouts). False on EOF, an
  // error or a bad record (errno 0 for a clean close). One reader at a
  // time.
  bool ReadFull(void* buf, size_t n);
  // True when plaintext already received waits to be read (poll() on the
  // socket would not show it).
  bool HasPending();

 private:
  TlsSession(SSL* ssl, BIO* in, BIO* out, int fd) : ssl_(ssl), in_(in), out_(out), fd_(fd) {}
  // Moves what OpenSSL wrote to its output buffer into `records`.
  void DrainLocked(std::vector<uint8_t>* records) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  SSL* const ssl_ ABSL_PT_GUARDED_BY(mu_);
  BIO* const in_;   // records received, for OpenSSL to read
  BIO* const out_;  // records OpenSSL made, to be sent
  const int fd_;
  std::vector<uint8_t> receive_buffer_;  // the reader's
};

}  // namespace engram

#endif  // ENGRAM_COMMON_NET_TLS_H_
