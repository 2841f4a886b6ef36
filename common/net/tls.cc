#include "common/net/tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/net/socket_io.h"

namespace engram {
namespace {

// OpenSSL's queued errors as one line (and the queue cleared).
std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    // "error:0A000086:SSL routines::certificate verify failed" -> the reason
    const char* reason = std::strrchr(buf, ':');
    absl::StrAppend(&out, out.empty() ? "" : "; ", reason != nullptr ? reason + 1 : buf);
  }
  return out.empty() ? "unknown TLS error" : out;
}

absl::Status FileError(const std::string& what, const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", path, ": ", OpenSslErrors(), " (a PEM file is expected)"));
}

SSL_CTX* NewContext(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // No session tickets: they would arrive after the handshake as records
  // the row stream does not expect, and a session is as long as its TCP
  // connection anyway. No renegotiation either.
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
  return ctx;
}

void SetSocketTimeouts(int fd, absl::Duration d) {
  timeval tv = absl::ToTimeval(d);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

bool IsIpAddress(const std::string& name) {
  in6_addr a6;
  in_addr a4;
  return ::inet_pton(AF_INET, name.c_str(), &a4) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), &a6) == 1;
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the ", what, " ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " ", path, " holds no PEM block (-----BEGIN ...)"));
  }
  return text.str();
}

absl::StatusOr<std::shared_ptr<TlsContext>> TlsContext::Server(const TlsFiles& files) {
  if (files.cert_file.empty() || files.key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  }
  SSL_CTX* ctx = NewContext(/*server=*/true);
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslErrors());
  std::shared_ptr<TlsContext> context(new TlsContext(ctx, true));
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    return FileError("TLS certificate", files.cert_file);
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return FileError("TLS key", files.key_file);
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("TLS key ", files.key_file,
                                                   " does not match the certificate ",
                                                   files.cert_file, ": ", OpenSslErrors()));
  }
  if (!files.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1) {
      return FileError("TLS client CA", files.ca_file);
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.ca_file.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return context;
}

absl::StatusOr<std::shared_ptr<TlsContext>> TlsContext::Client(const TlsFiles& files) {
  if (files.ca_file.empty()) {
    return absl::InvalidArgumentError("TLS to a shard needs the CA file of its certificate");
  }
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both its file and its key file");
  }
  SSL_CTX* ctx = NewContext(/*server=*/false);
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslErrors());
  std::shared_ptr<TlsContext> context(new TlsContext(ctx, false));
  if (SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1) {
    return FileError("TLS CA", files.ca_file);
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!files.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
      return FileError("TLS client certificate", files.cert_file);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
      return FileError("TLS client key", files.key_file);
    }
  }
  return context;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

absl::StatusOr<std::unique_ptr<TlsSession>> TlsSession::Handshake(const TlsContext& context, int fd,
                                                                  const std::string& peer_name,
                                                                  absl::Duration timeout) {
  SSL* ssl = SSL_new(context.ctx());
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (ssl == nullptr || in == nullptr || out == nullptr) {
    SSL_free(ssl);
    BIO_free(in);
    BIO_free(out);
    return absl::InternalError("SSL_new: " + OpenSslErrors());
  }
  BIO_set_mem_eof_return(in, -1);  // empty means "more to come", not EOF
  BIO_up_ref(in);                  // the session keeps pointers to both
  BIO_up_ref(out);
  SSL_set_bio(ssl, in, out);
  std::unique_ptr<TlsSession> session(new TlsSession(ssl, in, out, fd));
  if (context.is_server()) {
    SSL_set_accept_state(ssl);
  } else {
    SSL_set_connect_state(ssl);
    if (IsIpAddress(peer_name)) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), peer_name.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, peer_name.c_str());
      SSL_set1_host(ssl, peer_name.c_str());
    }
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<uint8_t> records;
  uint8_t buf[16384];
  for (;;) {
    int rc;
    int error;
    {
      absl::MutexLock lock(&session->mu_);
      rc = SSL_do_handshake(ssl);
      error = SSL_get_error(ssl, rc);
      records.clear();
      session->DrainLocked(&records);
    }
    // Send what the handshake wrote, alerts included (a refused peer
    // learns why).
    if (!records.empty()) {
      SetSocketTimeouts(fd, std::max(deadline - absl::Now(), absl::Milliseconds(1)));
      iovec iov = {records.data(), records.size()};
      if (!WriteFull(fd, &iov, 1) && rc == 1) {
        return absl::UnavailableError(
            absl::StrCat("TLS handshake with ", peer_name, ": send: ", std::strerror(errno)));
      }
    }
    if (rc == 1) break;
    if (error != SSL_ERROR_WANT_READ) {
      const long verify = SSL_get_verify_result(ssl);
      const std::string reason = OpenSslErrors();
      if (verify != X509_V_OK) {
        return absl::UnauthenticatedError(
            absl::StrCat("TLS handshake with ", peer_name,
                         ": certificate refused: ", X509_verify_cert_error_string(verify)));
      }
      if (absl::StrContains(reason, "certificate") || absl::StrContains(reason, "alert")) {
        return absl::UnauthenticatedError(
            absl::StrCat("TLS handshake with ", peer_name, ": ", reason));
      }
      return absl::UnavailableError(absl::StrCat("TLS handshake with ", peer_name, ": ", reason,
                                                 " (is the peer speaking TLS?)"));
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "TLS handshake with ", peer_name, " took over ", absl::FormatDuration(timeout)));
    }
    SetSocketTimeouts(fd, left);
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) {
      return absl::UnavailableError(absl::StrCat("TLS handshake with ", peer_name,
                                                 ": the peer closed the connection (does it "
                                                 "speak TLS, and accept this certificate?)"));
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(absl::StrCat(
            "TLS handshake with ", peer_name, " took over ", absl::FormatDuration(timeout)));
      }
      return absl::UnavailableError(
          absl::StrCat("TLS handshake with ", peer_name, ": ", std::strerror(errno)));
    }
    absl::MutexLock lock(&session->mu_);
    BIO_write(in, buf, static_cast<int>(n));
  }
  SetSocketTimeouts(fd, absl::ZeroDuration());  // the caller's from here on
  return session;
}

TlsSession::~TlsSession() {
  SSL_free(ssl_);
  BIO_free(in_);
  BIO_free(out_);
}

void TlsSession::DrainLocked(std::vector<uint8_t>* records) {
  const size_t pending = BIO_ctrl_pending(out_);
  if (pending == 0) return;
  const size_t at = records->size();
  records->resize(at + pending);
  const int n = BIO_read(out_, records->data() + at, static_cast<int>(pending));
  records->resize(at + static_cast<size_t>(std::max(n, 0)));
}

bool TlsSession::Seal(const struct iovec* iov, int n, std::vector<uint8_t>* records) {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < n; ++i) {
    if (iov[i].iov_len == 0) continue;
    size_t written = 0;
    if (SSL_write_ex(ssl_, iov[i].iov_base, iov[i].iov_len, &written) != 1 ||
        written != iov[i].iov_len) {
      ERR_clear_error();
      return false;
    }
  }
  DrainLocked(records);
  return true;
}

bool TlsSession::ReadFull(void* buf, size_t n) {
  uint8_t* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < n) {
    {
      absl::MutexLock lock(&mu_);
      size_t k = 0;
      if (SSL_read_ex(ssl_, p + got, n - got, &k) == 1) {
        got += k;
        continue;
      }
      const int error = SSL_get_error(ssl_, 0);
      if (error == SSL_ERROR_ZERO_RETURN) {  // close_notify
        errno = 0;
        return false;
      }
      if (error != SSL_ERROR_WANT_READ) {
        ERR_clear_error();
        errno = EPROTO;
        return false;
      }
    }
    receive_buffer_.resize(16384 + 512);  // one record and its overhead
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
    const ssize_t k = ::recv(fd_, receive_buffer_.data(), receive_buffer_.size(), 0);
    if (k == 0) {
      errno = 0;
      return false;
    }
    if (k < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    absl::MutexLock lock(&mu_);
    BIO_write(in_, receive_buffer_.data(), static_cast<int>(k));
  }
  return true;
}

bool TlsSession::HasPending() {
  absl::MutexLock lock(&mu_);
  return SSL_pending(ssl_) > 0 || BIO_ctrl_pending(in_) > 0;
}

}  // namespace engram
