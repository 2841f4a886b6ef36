#include "common/testing/test_certs.h"

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"

namespace engram::testing {
namespace {

struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertDeleter {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;
using Cert = std::unique_ptr<X509, CertDeleter>;

Key NewKey() { return Key(EVP_EC_gen("P-256")); }

void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext != nullptr) {
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
}

// A certificate for `key` named `cn`, valid from `from_days` to `to_days`
// (relative to now), signed by issuer/issuer_key (itself when null).
Cert NewCert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, bool ca,
             const char* san, long from_days, long to_days) {
  static long serial = 1;
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), from_days * 86400);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), to_days * 86400);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  AddExtension(cert.get(), signer, NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
  AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash");
  if (ca) {
    AddExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExtension(cert.get(), signer, NID_authority_key_identifier, "keyid");
    AddExtension(cert.get(), signer, NID_key_usage, "critical,digitalSignature");
    AddExtension(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  if (san != nullptr) AddExtension(cert.get(), signer, NID_subject_alt_name, san);
  X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256());
  return cert;
}

absl::Status WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::InternalError("cannot write " + path);
  const bool ok = cert != nullptr
                      ? PEM_write_X509(f, cert) == 1
                      : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  return ok ? absl::OkStatus() : absl::InternalError("PEM_write failed for " + path);
}

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  TestCerts out;
  const auto path = [&](const char* name) { return absl::StrCat(dir, "/", name); };
  Key ca_key = NewKey(), other_key = NewKey(), server_key = NewKey(), client_key = NewKey(),
      expired_key = NewKey(), stranger_key = NewKey();
  if (!ca_key || !other_key || !server_key || !client_key || !expired_key || !stranger_key) {
    return absl::InternalError("EC key generation failed");
  }
  Cert ca = NewCert(ca_key.get(), "engram test CA", nullptr, nullptr, true, nullptr, -1, 30);
  Cert other = NewCert(other_key.get(), "another CA", nullptr, nullptr, true, nullptr, -1, 30);
  Cert server = NewCert(server_key.get(), "engram-shard", ca.get(), ca_key.get(), false,
                        "IP:127.0.0.1,DNS:localhost", -1, 30);
  Cert client = NewCert(client_key.get(), "worker", ca.get(), ca_key.get(), false, nullptr, -1, 30);
  Cert expired =
      NewCert(expired_key.get(), "old worker", ca.get(), ca_key.get(), false, nullptr, -3, -1);
  Cert stranger =
      NewCert(stranger_key.get(), "stranger", other.get(), other_key.get(), false, nullptr, -1, 30);
  struct File {
    std::string* field;
    const char* name;
    X509* cert;
    EVP_PKEY* key;
  };
  const File files[] = {
      {&out.ca_cert, "ca.crt", ca.get(), nullptr},
      {&out.other_ca_cert, "other-ca.crt", other.get(), nullptr},
      {&out.server_cert, "server.crt", server.get(), nullptr},
      {&out.server_key, "server.key", nullptr, server_key.get()},
      {&out.client_cert, "client.crt", client.get(), nullptr},
      {&out.client_key, "client.key", nullptr, client_key.get()},
      {&out.expired_cert, "expired.crt", expired.get(), nullptr},
      {&out.expired_key, "expired.key", nullptr, expired_key.get()},
      {&out.stranger_cert, "stranger.crt", stranger.get(), nullptr},
      {&out.stranger_key, "stranger.key", nullptr, stranger_key.get()},
  };
  for (const File& f : files) {
    *f.field = path(f.name);
    if (absl::Status s = WritePem(*f.field, f.cert, f.key); !s.ok()) return s;
  }
  return out;
}

}  // namespace engram::testing
