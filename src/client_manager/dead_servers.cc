// Programs' reports that their leased GPU server is dead (docs/design.md, "Dead servers"): the
// report's checks, the manager's own look at the address, and the replacement of a lease whose
// server is confirmed gone. Runs on the manager's loop thread, the probe on a call thread.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>

#include "client_manager/manager.h"
#include "client_manager/manager_internal.h"
#include "common/json.h"
#include "common/json_fields.h"

namespace flyt::client_manager {

using internal::Ms;
using internal::ProbeServer;
using internal::UnixAddress;
using nlohmann::json;
using std::chrono::milliseconds;

json internal::ProbeServer(const std::string& address, milliseconds timeout) {
  auto verdict = [](const char* v, const std::string& why) {
    return json{{"verdict", v}, {"why", why}};
  };
  // Only a definite no: a host or network unreachable, or a reset, is often a passing blip (a
  // route change, an overloaded listener) and must not cost the other programs their server.
  auto dead_errno = [](int e) { return e == ECONNREFUSED || e == ENOENT; };
  if (address.rfind("unix:", 0) == 0) {
    const std::string path = address.substr(5);
    if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
      return verdict("unknown", "not a socket path");
    }
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return verdict("unknown", std::strerror(errno));
    sockaddr_un addr = UnixAddress(path);
    int rc;
    do {
      rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0 || errno == EAGAIN) return verdict("alive", "it accepts connections");
    const int e = errno;
    return verdict(dead_errno(e) ? "dead" : "unknown", std::strerror(e));
  }
  std::string host, port;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return verdict("unknown", "not HOST:PORT");
    }
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return verdict("unknown", "not HOST:PORT");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* infos = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &infos); rc != 0) {
    return verdict("unknown", std::string("cannot resolve ") + host + ": " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(infos, ::freeaddrinfo);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool all_dead = true;
  std::string why = "no address";
  for (addrinfo* ai = infos; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         ai->ai_protocol));
    if (!fd.valid()) {
      all_dead = false;
      why = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        const auto left = std::chrono::duration_cast<milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd p{fd.get(), POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0))) <= 0) {
          all_dead = false;
          why = "no answer within " + Ms(timeout);
          continue;
        }
        socklen_t len = sizeof err;
        if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) return verdict("alive", "it accepts connections");
    all_dead = all_dead && dead_errno(err);
    why = std::strerror(err);
  }
  return verdict(all_dead ? "dead" : "unknown", why);
}

bool ClientManager::HandleDeadReport(Conn& conn, const json& request) {
  JsonFields f(request);
  std::string lease_id, server;
  Status s = f.Only({"op", "lease_id", "server"});
  if (s.ok()) s = f.OptionalString("lease_id", 256, lease_id);
  if (s.ok()) s = f.OptionalString("server", 1024, server);
  if (s.ok() && (lease_id.empty() || server.empty())) {
    s = InvalidArgument("server_dead needs lease_id and server");
  }
  if (s.ok() && conn.reported) s = InvalidArgument("one server_dead report per connection");
  if (!s.ok()) {
    spdlog::warn("{} sent a bad report ({}); connection closed", conn.Who(), s.message());
    conn.protocol_error = true;
    (void)Send(conn, json{{"ok", false}, {"code", "invalid_argument"}, {"error", s.message()}});
    return false;
  }
  conn.reported = true;
  ++counters_.dead_reports;
  auto refuse = [&](const char* code, const std::string& error) {
    ++counters_.dead_reports_refused;
    spdlog::warn("{} reports the server {} of lease {} dead: refused ({})", conn.Who(), server,
                 lease_id, error);
    if (!Send(conn, json{{"ok", false}, {"code", code}, {"error", error}})) {
      conn.closing = "write failed";
    }
    return true;
  };
  // Only a program that was given the lease may report its server.
  if (conn.lease_id != lease_id ||
      (conn.state != Conn::State::kHolding && conn.state != Conn::State::kDone)) {
    return refuse("permission_denied", "this connection was not given lease " + lease_id);
  }
  auto it = leases_.find(lease_id);
  auto sit = it == leases_.end() ? slots_.end() : slots_.find(it->second->slot_key);
  if (it == leases_.end() || it->second->releasing || sit == slots_.end() ||
      sit->second->lease_id != lease_id) {
    // Dropped already: the next acquire gets another lease.
    if (!Send(conn, json{{"ok", true}, {"replaced", true}})) conn.closing = "write failed";
    return true;
  }
  Lease& lease = *it->second;
  if (lease.server != server) {
    return refuse("invalid_argument",
                  "lease " + lease_id + " is served at " + lease.server + ", not at " + server);
  }
  lease.dead_reporters.push_back(conn.id);
  if (lease.probing) return true;  // one probe answers every report that comes meanwhile
  lease.probing = true;
  spdlog::warn("{} cannot connect to the GPU server {} of lease {}; checking it", conn.Who(),
               server, lease_id);
  Outcome outcome;
  outcome.kind = Outcome::Kind::kProbe;
  outcome.key = lease_id;
  RunCall(std::move(outcome), [address = server, timeout = tuning_.dead_probe_timeout] {
    return Result<json>(ProbeServer(address, timeout));
  });
  return true;
}

void ClientManager::OnProbed(const std::string& lease_id, Result<json> verdict) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;  // erased leases have answered their reporters
  Lease& lease = *it->second;
  lease.probing = false;
  std::vector<uint64_t> reporters;
  reporters.swap(lease.dead_reporters);
  auto sit = slots_.find(lease.slot_key);
  if (lease.releasing || sit == slots_.end() || sit->second->lease_id != lease_id) {
    AnswerReporters(std::move(reporters), json{{"ok", true}, {"replaced", true}});
    return;
  }
  Slot& slot = *sit->second;
  const std::string v = verdict.ok() ? verdict->value("verdict", "unknown") : "unknown";
  const std::string why = verdict.ok() ? verdict->value("why", "") : verdict.status().message();
  auto refuse = [&](const char* code, const std::string& error) {
    counters_.dead_reports_refused += reporters.size();
    spdlog::warn("lease {} kept: {}", lease_id, error);
    AnswerReporters(std::move(reporters), json{{"ok", false}, {"code", code}, {"error", error}});
  };
  if (v != "dead") {
    refuse("conflict", "the GPU server " + lease.server + " of lease " + lease_id +
                           (v == "alive" ? " accepts connections" : " could not be checked") +
                           " (" + why + "); the lease is kept");
    return;
  }
  const TimePoint now = Now();
  std::erase_if(dead_drops_, [&](const auto& kv) {
    return now - kv.second >= tuning_.dead_server_interval;
  });
  if (dead_drops_.contains(slot.key)) {
    refuse("unavailable", "the GPU server " + lease.server + " of lease " + lease_id +
                              " is gone, but this profile's lease was replaced less than " +
                              Ms(tuning_.dead_server_interval) +
                              " ago; it is replaced at its next renewal, or ask again later");
    return;
  }
  dead_drops_[slot.key] = now;
  counters_.dead_servers_replaced += 1;
  spdlog::warn("the GPU server {} of lease {} is gone ({}); the lease is released and a new one "
               "asked for",
               lease.server, lease_id, why);
  // Held by the replacement from now: programs that come meanwhile wait for the new lease, which
  // is asked for once the old one's share is given back.
  slot.acquiring = true;
  slot.reacquire_after = lease_id;
  DropLease(lease_id, "lease_failed",
            "its GPU server at " + lease.server + " is gone (" + why + ")");
  AnswerReporters(std::move(reporters), json{{"ok", true}, {"replaced", true}});
}

void ClientManager::AnswerReporters(std::vector<uint64_t> reporters, const json& answer) {
  for (uint64_t cid : reporters) {
    auto c = conns_.find(cid);
    if (c == conns_.end() || c->second->closing != nullptr) continue;
    if (!Send(*c->second, answer)) c->second->closing = "write failed";
  }
}

}  // namespace flyt::client_manager
