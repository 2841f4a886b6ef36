#include "common/metrics/exposer.h"

#include <civetweb.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "common/metrics/detail.h"
#include "common/metrics/text_serializer.h"

namespace engram::metrics {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// The address to connect to in order to reach a server bound per
// `bind_address` on `port`: the bound host itself, or loopback for a
// wildcard or port-only bind. Empty if the host does not resolve.
std::vector<char> KnockAddress(const std::string& bind_address, int port) {
  std::string entry = bind_address.substr(0, bind_address.find(','));
  std::string host;
  int family = AF_INET;  // civetweb binds host names and bare ports as IPv4
  if (!entry.empty() && entry[0] == '[') {
    host = entry.substr(1, entry.find(']') - 1);
    if (host == "::") host = "::1";
    family = AF_INET6;
  } else if (const auto colon = entry.rfind(':'); colon != std::string::npos) {
    host = entry.substr(0, colon);
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
    return {};
  }
  const auto* bytes = reinterpret_cast<const char*>(found->ai_addr);
  std::vector<char> address(bytes, bytes + found->ai_addrlen);
  ::freeaddrinfo(found);
  return address;
}

bool SameOwner(const std::weak_ptr<Collectable>& a, const std::weak_ptr<Collectable>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Exposer>> Exposer::Create(const std::string& bind_address,
                                                         std::size_t num_threads) {
  if (bind_address.empty()) {
    return absl::InvalidArgumentError("metrics exposer: empty bind address");
  }
  if (num_threads == 0) {
    return absl::InvalidArgumentError("metrics exposer: num_threads must be at least 1");
  }
  static std::once_flag init_once;
  std::call_once(init_once, [] { mg_init_library(0); });

  std::unique_ptr<Exposer> exposer(new Exposer());
  const std::string threads = std::to_string(num_threads);
  const char* options[] = {
      "listening_ports", bind_address.c_str(), "num_threads", threads.c_str(), "request_timeout_ms",
      "10000",           "enable_keep_alive",  "no",          nullptr,
  };
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = &Exposer::LogMessage;
  mg_init_data init{&callbacks, exposer.get(), options};
  char error_text[256] = {};
  unsigned error_code = 0;
  mg_error_data error{&error_code, error_text, sizeof(error_text)};

  exposer->context_ = mg_start2(&init, &error);
  std::string log;
  {
    absl::MutexLock lock(&exposer->log_mutex_);
    exposer->starting_ = false;
    log = std::move(exposer->startup_log_);
  }
  if (exposer->context_ == nullptr) {
    std::string message = "metrics exposer: cannot listen on \"" + bind_address + "\": ";
    message += log.empty() ? std::string(error_text) : log;
    if (log.find("invalid port spec") != std::string::npos) {
      return absl::InvalidArgumentError(message);
    }
    return absl::UnavailableError(message);
  }

  mg_server_port ports[8];
  const int n = mg_get_server_ports(exposer->context_, 8, ports);
  for (int i = 0; i < n; ++i) exposer->ports_.push_back(ports[i].port);
  if (!exposer->ports_.empty()) {
    exposer->knock_address_ = KnockAddress(bind_address, exposer->ports_.front());
  }
  return exposer;
}

Exposer::~Exposer() {
  if (context_ == nullptr) return;
  // civetweb's accept loop polls in 2-second quanta and notices mg_stop()'s
  // flag only between them; connecting to the port wakes it, so stopping
  // takes milliseconds instead of up to 2 s.
  std::atomic<bool> stopped{false};
  std::thread knocker;
  if (!knock_address_.empty()) knocker = std::thread([&] { KnockUntil(stopped); });
  mg_stop(context_);  // joins civetweb's threads
  stopped.store(true);
  if (knocker.joinable()) knocker.join();
}

void Exposer::KnockUntil(const std::atomic<bool>& stopped) const {
  const auto* address = reinterpret_cast<const sockaddr*>(knock_address_.data());
  // Bounded: 300 knocks 10 ms apart outlast civetweb's 2 s quantum.
  for (int i = 0; i < 300 && !stopped.load(); ++i) {
    const int fd = ::socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      ::connect(fd, address, static_cast<socklen_t>(knock_address_.size()));
      ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Exposer::RegisterCollectable(const std::weak_ptr<Collectable>& collectable,
                                  const std::string& uri) {
  if (uri.empty() || uri[0] != '/') {
    detail::Fatal("Exposer::RegisterCollectable: uri \"" + uri + "\" must start with '/'");
  }
  Endpoint* endpoint;
  {
    absl::MutexLock lock(&mutex_);
    auto& slot = endpoints_[uri];
    if (slot == nullptr) {
      slot = std::make_unique<Endpoint>();
      mg_set_request_handler(context_, uri.c_str(), &Exposer::HandleRequest, slot.get());
    }
    endpoint = slot.get();
  }
  absl::MutexLock lock(&endpoint->mutex);
  for (const auto& existing : endpoint->collectables) {
    if (SameOwner(existing, collectable)) return;
  }
  endpoint->collectables.push_back(collectable);
}

void Exposer::RemoveCollectable(const std::weak_ptr<Collectable>& collectable,
                                const std::string& uri) {
  Endpoint* endpoint;
  {
    absl::MutexLock lock(&mutex_);
    auto it = endpoints_.find(uri);
    if (it == endpoints_.end()) return;
    endpoint = it->second.get();
  }
  absl::MutexLock lock(&endpoint->mutex);
  auto& list = endpoint->collectables;
  for (auto it = list.begin(); it != list.end();) {
    it = (SameOwner(*it, collectable) || it->expired()) ? list.erase(it) : it + 1;
  }
}

int Exposer::HandleRequest(mg_connection* conn, void* cbdata) {
  auto* endpoint = static_cast<Endpoint*>(cbdata);
  const mg_request_info* info = mg_get_request_info(conn);
  const bool head = std::strcmp(info->request_method, "HEAD") == 0;
  if (!head && std::strcmp(info->request_method, "GET") != 0) {
    mg_send_http_error(conn, 405, "%s", "only GET and HEAD are supported\n");
    return 405;
  }

  std::vector<std::shared_ptr<Collectable>> collectables;
  {
    absl::MutexLock lock(&endpoint->mutex);
    for (const auto& weak : endpoint->collectables) {
      if (auto strong = weak.lock()) collectables.push_back(std::move(strong));
    }
  }
  std::vector<MetricFamily> families;
  for (const auto& collectable : collectables) {
    for (MetricFamily& family : collectable->Collect()) families.push_back(std::move(family));
  }
  const std::string body = TextSerializer().Serialize(families);

  mg_send_http_ok(conn, kContentType, static_cast<long long>(body.size()));
  if (!head && !body.empty()) mg_write(conn, body.data(), body.size());
  return 200;
}

int Exposer::LogMessage(const mg_connection* conn, const char* message) {
  const mg_context* context = conn != nullptr ? mg_get_context(conn) : nullptr;
  auto* self = context != nullptr ? static_cast<Exposer*>(mg_get_user_data(context)) : nullptr;
  if (self != nullptr) {
    absl::MutexLock lock(&self->log_mutex_);
    if (self->starting_) {
      if (!self->startup_log_.empty()) self->startup_log_ += "; ";
      self->startup_log_ += message;
      return 1;
    }
  }
  std::fprintf(stderr, "engram::metrics exposer: %s\n", message);
  return 1;
}

}  // namespace engram::metrics
