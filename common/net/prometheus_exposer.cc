#include "common/net/prometheus_exposer.h"

#include <CivetServer.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <thread>
#include <utility>

#include "absl/status/status.h"

namespace engram {
namespace {

// civetweb's log lines while this thread starts an exposer (it binds on the
// calling thread), or null: the reason a start failed.
thread_local std::string* t_start_log = nullptr;

int LogMessage(const mg_connection* /*conn*/, const char* message) {
  if (t_start_log != nullptr) {
    if (!t_start_log->empty()) *t_start_log += "; ";
    *t_start_log += message;
  } else {
    std::fprintf(stderr, "metrics exposer: %s\n", message);
  }
  return 1;  // handled: civetweb does not log it again
}

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

// Connects to `address` every 10 ms until `stopped`, at most 3 s (beyond
// civetweb's 2 s poll quantum).
void KnockUntil(const std::vector<char>& knock, const std::atomic<bool>& stopped) {
  const auto* address = reinterpret_cast<const sockaddr*>(knock.data());
  for (int i = 0; i < 300 && !stopped.load(); ++i) {
    const int fd = ::socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      ::connect(fd, address, static_cast<socklen_t>(knock.size()));
      ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& bind_address) {
  if (bind_address.empty()) {
    return absl::InvalidArgumentError("metrics exposer: empty bind address");
  }
  CivetCallbacks callbacks;
  callbacks.log_message = &LogMessage;
  std::string log;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::string failure;
  t_start_log = &log;
  try {
    exposer = std::make_unique<prometheus::Exposer>(bind_address, /*num_threads=*/2, &callbacks);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown error";
  }
  t_start_log = nullptr;
  if (exposer == nullptr) {
    std::string message = "metrics exposer: cannot listen on \"" + bind_address + "\": ";
    message += log.empty() ? failure : log;
    if (log.find("invalid port spec") != std::string::npos) {
      return absl::InvalidArgumentError(message);
    }
    return absl::UnavailableError(message);
  }
  const std::vector<int> ports = exposer->GetListeningPorts();
  if (ports.empty()) {
    return absl::UnavailableError("metrics exposer: no listening port on \"" + bind_address + "\"");
  }
  return std::unique_ptr<MetricsExposer>(new MetricsExposer(
      std::move(exposer), ports.front(), KnockAddress(bind_address, ports.front())));
}

MetricsExposer::MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port,
                               std::vector<char> knock_address)
    : exposer_(std::move(exposer)), port_(port), knock_address_(std::move(knock_address)) {}

MetricsExposer::~MetricsExposer() {
  std::atomic<bool> stopped{false};
  std::thread knocker;
  if (!knock_address_.empty()) {
    knocker = std::thread([this, &stopped] { KnockUntil(knock_address_, stopped); });
  }
  exposer_.reset();  // joins civetweb's threads
  stopped.store(true);
  if (knocker.joinable()) knocker.join();
}

}  // namespace engram
