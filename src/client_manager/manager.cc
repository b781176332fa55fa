#include "client_manager/manager.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>

#include "client_manager/manager_internal.h"
#include "common/json.h"
#include "common/json_fields.h"

namespace flyt::client_manager {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using internal::kNever;
using internal::Ms;
using internal::TimePoint;
using internal::UnixAddress;

}  // namespace

sockaddr_un internal::UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), std::min(path.size(), sizeof addr.sun_path - 1));
  return addr;
}

// mkdir -p for the socket's directory (0755: the socket's own mode decides who may connect).
Status MakeParentDirs(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string dir = path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoError("create directory " + dir, errno);
    }
  }
  return Status::Ok();
}

namespace {

bool SomeoneListens(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return false;
  sockaddr_un addr = UnixAddress(path);
  return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
}

// A fresh Idempotency-Key for one intended lease: 128 random bits.
std::string NewIdempotencyKey() {
  unsigned char bytes[16] = {};
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (got < sizeof bytes) {  // no kernel randomness: unique enough within this host and process
    const auto t = std::chrono::steady_clock::now().time_since_epoch().count();
    std::memcpy(bytes, &t, std::min(sizeof t, sizeof bytes));
    const pid_t pid = ::getpid();
    std::memcpy(bytes + 8, &pid, sizeof pid);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key = "flyt-cm-";
  for (unsigned char c : bytes) {
    key += kHex[c >> 4];
    key += kHex[c & 15];
  }
  return key;
}
}  // namespace

ClientManager::ClientManager(ClientManagerConfig config, Clock& clock, ManagerTuning tuning)
    : config_(std::move(config)),
      clock_(clock),
      tuning_(tuning),
      cluster_(config_.cluster_manager, config_.token) {}

ClientManager::~ClientManager() { Stop(); }

Status ClientManager::Start() {
  const std::string& path = config_.socket_path;
  FLYT_RETURN_IF_ERROR(MakeParentDirs(path));
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return AlreadyExists(path + " exists and is not a socket; it is left alone");
    }
    if (SomeoneListens(path)) {
      return AlreadyExists("a flyt-client-manager already listens on " + path);
    }
    spdlog::info("replacing the socket {} left by a manager that is gone", path);
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket(AF_UNIX)", errno);
  // Bound under a temporary name, given its mode, then renamed over the path: the socket is
  // never reachable with another mode, and a stale file is replaced in one step.
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  const bool via_tmp = tmp.size() < sizeof(sockaddr_un::sun_path);
  const std::string bind_path = via_tmp ? tmp : path;
  ::unlink(bind_path.c_str());
  sockaddr_un addr = UnixAddress(bind_path);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return ErrnoError("bind " + bind_path, errno);
  }
  if (::chmod(bind_path.c_str(), config_.socket_mode) != 0) {
    Status s = ErrnoError("chmod " + bind_path, errno);
    ::unlink(bind_path.c_str());
    return s;
  }
  if (::listen(fd.get(), 128) != 0) {
    Status s = ErrnoError("listen on " + bind_path, errno);
    ::unlink(bind_path.c_str());
    return s;
  }
  if (via_tmp && ::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = ErrnoError("rename " + tmp + " to " + path, errno);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::stat(path.c_str(), &st) == 0) socket_inode_ = st.st_ino;
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return ErrnoError("eventfd", errno);
  listen_fd_ = std::move(fd);
  wake_fd_ = std::move(wake);
  loop_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void ClientManager::Stop() {
  if (!loop_.joinable()) return;
  stop_.store(true);
  Wake();
  loop_.join();
  struct stat st{};
  if (::stat(config_.socket_path.c_str(), &st) == 0 && st.st_ino == socket_inode_) {
    ::unlink(config_.socket_path.c_str());
  }
  listen_fd_.Reset();
}

void ClientManager::Wake() {
  if (!wake_fd_.valid()) return;
  uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof one);
}

ManagerStats ClientManager::GetStats() const {
  MutexLock lock(mu_);
  return published_;
}

// ---- the loop ---------------------------------------------------------------------------------

void ClientManager::Loop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stop_.load()) {
    TakeOutcomes();
    Timers();
    // Reap what this pass closed.
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second->closing == nullptr) {
        ++it;
        continue;
      }
      Conn& conn = *it->second;
      if (conn.protocol_error) ++counters_.closed_protocol;
      spdlog::debug("connection of {} closed: {}", conn.Who(), conn.closing);
      Detach(conn);
      it = conns_.erase(it);
    }
    Publish();

    TimePoint next = kNever;
    for (const auto& [id, conn] : conns_) {
      next = std::min({next, conn->first_line_deadline, conn->acquire_deadline});
    }
    for (const auto& [id, lease] : leases_) {
      if (lease->releasing || lease->call_in_flight) continue;
      next = std::min({next, lease->next_renew, lease->release_at});
    }
    milliseconds wait = tuning_.max_poll;
    if (next != kNever) {
      auto until = std::chrono::duration_cast<milliseconds>(next - Now()) + milliseconds(1);
      wait = std::clamp(until, milliseconds(0), tuning_.max_poll);
    }

    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    fds.push_back({listen_fd_.get(), POLLIN, 0});
    for (const auto& [id, conn] : conns_) {
      fds.push_back({conn->fd.get(), POLLIN, 0});
      ids.push_back(id);
    }
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (n < 0 && errno != EINTR) {
      spdlog::error("poll: {}", std::strerror(errno));
      std::this_thread::sleep_for(milliseconds(100));
      continue;
    }
    if (n <= 0) continue;
    if (fds[0].revents != 0) {
      uint64_t count = 0;
      (void)!::read(wake_fd_.get(), &count, sizeof count);
    }
    if (fds[1].revents != 0) Accept();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents != 0) ReadFrom(ids[i - 2]);
    }
  }

  // Shutting down: programs are cut off, calls in flight finish (each is bounded), and every
  // lease still held is released so that its share does not wait for its ttl.
  for (auto& [id, conn] : conns_) {
    conn->closing = "the client manager is stopping";
    Detach(*conn);
  }
  conns_.clear();
  for (;;) {
    std::map<uint64_t, std::thread> calls;
    {
      MutexLock lock(mu_);
      calls.swap(calls_);
    }
    if (calls.empty()) break;
    for (auto& [id, thread] : calls) thread.join();
    TakeOutcomes();  // an acquire that completes now is released at once (stop_ is set)
  }
  for (auto& [id, lease] : leases_) {
    if (!lease->releasing) StartRelease(*lease, "the client manager is stopping");
  }
  for (;;) {
    std::map<uint64_t, std::thread> calls;
    {
      MutexLock lock(mu_);
      calls.swap(calls_);
    }
    if (calls.empty()) break;
    for (auto& [id, thread] : calls) thread.join();
    TakeOutcomes();
  }
  Publish();
}

void ClientManager::Accept() {
  for (;;) {
    UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        spdlog::warn("accept on {}: {}", config_.socket_path, std::strerror(errno));
      }
      return;
    }
    auto conn = std::make_unique<Conn>();
    conn->id = ++next_conn_id_;
    conn->fd = std::move(fd);
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conn->fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      conn->peer_pid = cred.pid;
      conn->peer_uid = cred.uid;
    }
    if (conns_.size() >= static_cast<size_t>(config_.max_connections)) {
      ++counters_.refused_connections;
      spdlog::warn("refused {}: {} programs are connected (client.max_connections)", conn->Who(),
                   conns_.size());
      (void)Send(*conn, json{{"ok", false},
                             {"code", "resource_exhausted"},
                             {"error", "the flyt-client-manager on " + config_.socket_path +
                                           " serves " + std::to_string(conns_.size()) +
                                           " programs already (client.max_connections)"}});
      continue;  // closed as it goes out of scope
    }
    conn->first_line_deadline = Now() + tuning_.first_line_timeout;
    conns_.emplace(conn->id, std::move(conn));
  }
}

void ClientManager::ReadFrom(uint64_t conn_id) {
  auto it = conns_.find(conn_id);
  if (it == conns_.end() || it->second->closing != nullptr) return;
  Conn& conn = *it->second;
  char buf[16 << 10];
  for (;;) {
    ssize_t n = ::recv(conn.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      conn.closing = n == 0 ? "disconnected" : "read error";
      return;
    }
    conn.in.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl = conn.in.find('\n'); nl != std::string::npos;
         nl = conn.in.find('\n', start)) {
      std::string line = conn.in.substr(start, nl - start);
      start = nl + 1;
      if (line.size() > kMaxLineBytes) break;  // refused below
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      if (!HandleLine(conn, line) && conn.closing == nullptr) conn.closing = "protocol error";
      if (conn.closing != nullptr) return;
    }
    conn.in.erase(0, start);
    if (conn.in.size() > kMaxLineBytes) {
      spdlog::warn("{} sent a line over {} bytes; connection closed", conn.Who(), kMaxLineBytes);
      conn.protocol_error = true;
      conn.closing = "line too long";
      return;
    }
  }
}

bool ClientManager::HandleLine(Conn& conn, const std::string& line) {
  if (line.size() > kMaxLineBytes) return false;
  auto parsed = ParseJson(line, "the request", kMaxLineBytes, 8);
  if (!parsed.ok() || !parsed->is_object()) {
    spdlog::warn("{} sent a line that is not a JSON object; connection closed", conn.Who());
    conn.protocol_error = true;
    FailAcquire(conn, "invalid_argument", "not a JSON object");
    return false;
  }
  JsonFields f(*parsed);
  std::string op;
  Status s = f.OptionalEnum("op", {"acquire", "server_dead"}, op);
  if (s.ok() && op.empty()) s = InvalidArgument("op is required");
  if (s.ok() && op == "server_dead") return HandleDeadReport(conn, *parsed);
  if (s.ok() && conn.state != Conn::State::kNew) {
    s = InvalidArgument("one acquire per connection; this one has asked already");
  }
  int64_t pid = 0;
  int64_t version = 1;
  LeaseProfile asked;
  if (s.ok()) s = f.OptionalInt<int64_t>("pid", 0, int64_t{1} << 32, pid);
  if (s.ok()) s = f.OptionalString("program", 256, conn.program);
  if (s.ok()) s = f.OptionalInt<int64_t>("version", 1, 1000000, version);
  if (s.ok()) {
    Result<JsonFields> p = f.OptionalFields("profile");
    s = p.status();
    if (s.ok()) s = p->Only({"sm_count", "sm_percent", "memory_mb", "gpu_model"});
    if (s.ok() && p->Has("sm_count") && p->Has("sm_percent")) {
      s = InvalidArgument("profile.sm_count and profile.sm_percent exclude each other");
    }
    uint32_t sm = 0;
    if (s.ok() && p->Has("sm_count")) {
      s = p->OptionalInt<uint32_t>("sm_count", 1, 1 << 20, sm);
      asked.sm_count = sm;
    }
    if (s.ok() && p->Has("sm_percent")) {
      s = p->OptionalInt<uint32_t>("sm_percent", 1, 100, sm);
      asked.sm_percent = sm;
    }
    uint64_t mb = 0;
    if (s.ok() && p->Has("memory_mb")) {
      s = p->OptionalInt<uint64_t>("memory_mb", 1, uint64_t{1} << 30, mb);
      asked.memory_mb = mb;
    }
    if (s.ok()) s = p->OptionalString("gpu_model", 256, asked.gpu_model);
  }
  if (!s.ok()) {
    spdlog::warn("{} sent a bad request ({}); connection closed", conn.Who(), s.message());
    conn.protocol_error = true;
    FailAcquire(conn, "invalid_argument", s.message());
    return false;
  }
  conn.first_line_deadline = kNever;
  const LeaseProfile profile = config_.lease.Overlaid(asked);
  if (!profile.memory_mb) {
    FailAcquire(conn, "invalid_argument",
                "no memory size for the lease: set [lease] memory_mb in the client manager's "
                "config or FLYT_REMOTE_MEMORY_MB in the program's environment");
    return true;
  }
  const std::string key = profile.Key();
  auto it = slots_.find(key);
  if (it == slots_.end()) {
    if (slots_.size() >= static_cast<size_t>(config_.max_profiles)) {
      FailAcquire(conn, "resource_exhausted",
                  "the flyt-client-manager holds " + std::to_string(slots_.size()) +
                      " different lease profiles already (client.max_profiles)");
      return true;
    }
    auto slot = std::make_unique<Slot>();
    slot->key = key;
    slot->profile = profile;
    it = slots_.emplace(key, std::move(slot)).first;
  }
  Slot& slot = *it->second;
  spdlog::info("{} asks for a GPU share {}", conn.Who(), key);
  if (!slot.lease_id.empty()) {
    Attach(conn, *leases_.at(slot.lease_id));
    return true;
  }
  conn.state = Conn::State::kWaiting;
  conn.slot_key = key;
  conn.asked_at = Now();
  conn.acquire_deadline = conn.asked_at + config_.acquire_timeout;
  slot.waiters.push_back(conn.id);
  if (!slot.acquiring) StartAcquire(slot);
  return true;
}

void ClientManager::StartAcquire(Slot& slot) {
  slot.acquiring = true;
  slot.acquire_started = Now();
  ++counters_.lease_requests;
  json body = slot.profile.ToJson();
  body["ttl_seconds"] = config_.ttl_seconds;
  body["client"] = config_.name;
  if (!config_.node.empty()) body["node"] = config_.node;
  // One key per intended lease: a creation no answer settled (the last one timed out) is asked
  // for again with its key, so the lease it may have made is the one this acquire gets.
  if (create_keys_.size() >= 2 * static_cast<size_t>(config_.max_profiles)) {
    std::erase_if(create_keys_, [&](const auto& kv) { return !slots_.contains(kv.first); });
  }
  std::string& key = create_keys_[slot.key];
  if (key.empty()) key = NewIdempotencyKey();
  Outcome outcome;
  outcome.kind = Outcome::Kind::kAcquire;
  outcome.key = slot.key;
  auto answered = std::make_shared<std::atomic<bool>>(false);
  outcome.answered = answered;
  RunCall(std::move(outcome),
          [cluster = cluster_, body, key, answered, stop = &stop_,
           timeout = config_.acquire_timeout, attempt = tuning_.create_attempt_timeout,
           pause = tuning_.create_retry_pause]() -> Result<json> {
            // Retried with the same key while no answer came (the request may have been
            // processed) or the lease's server is still starting, within acquire_timeout.
            const auto deadline = std::chrono::steady_clock::now() + timeout;
            for (;;) {
              const auto left = std::chrono::duration_cast<milliseconds>(
                  deadline - std::chrono::steady_clock::now());
              bool got = false;
              Result<json> r = cluster.Create(body, std::clamp(left, milliseconds(1), attempt),
                                              key, &got);
              answered->store(got);
              const bool starting = r.ok() && r->contains("state") && (*r)["state"].is_string() &&
                                    (*r)["state"].get<std::string>() == "starting";
              const auto now_left = std::chrono::duration_cast<milliseconds>(
                  deadline - std::chrono::steady_clock::now());
              if ((got && !starting) || stop->load() || now_left <= pause) return r;
              std::this_thread::sleep_for(pause);
            }
          });
}

void ClientManager::OnAcquired(const std::string& slot_key, Result<json> answer, bool answered) {
  if (answered) create_keys_.erase(slot_key);  // settled: the next lease gets a key of its own
  auto sit = slots_.find(slot_key);
  if (sit == slots_.end()) return;  // cannot happen: an acquiring slot is kept
  Slot& slot = *sit->second;
  slot.acquiring = false;
  std::vector<uint64_t> waiters;
  waiters.swap(slot.waiters);

  std::string code, error;
  json reply;
  std::string id;
  if (!answer.ok()) {
    code = ErrorCodeOf(answer.status());
    error = answer.status().message();
  } else {
    const json& a = *answer;
    auto str = [&](const json& j, const char* key) -> std::string {
      return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>()
                                                                    : std::string();
    };
    id = str(a, "id");
    const json server = a.contains("server") ? a["server"] : json::object();
    // A retry with a key whose lease has ended since (its first answer was lost and nobody
    // renewed it) is answered with that lease's first answer and lease_ended: settled, but of no
    // use. The key is gone above; the next program's acquire asks anew.
    const bool ended = a.is_object() && a.contains("lease_ended") &&
                       a["lease_ended"].is_boolean() && a["lease_ended"].get<bool>();
    const std::string address = str(server, "address");
    const std::string state = str(a, "state");
    if (id.empty()) {
      code = "internal";
      error = "the cluster manager's answer has no lease id";
    } else if (ended) {
      code = "unavailable";
      error = "lease " + id + " (a retry's answer) has ended since; try again";
    } else if ((!state.empty() && state != "ready") || address.empty() ||
               str(a, "secret").empty()) {
      code = "unavailable";
      error = "lease " + id + " is " + (state.empty() ? "not ready" : state) +
              (address.empty() ? " and has no server address" : "") +
              (str(a, "reason").empty() ? "" : ": " + str(a, "reason"));
      Lease tmp;
      tmp.id = id;
      auto lease = std::make_unique<Lease>(std::move(tmp));
      Lease& ref = *lease;
      leases_.emplace(id, std::move(lease));
      StartRelease(ref, "it came back without a running server");
    } else {
      const json gpu = a.contains("gpu") ? a["gpu"] : json::object();
      reply = json{{"ok", true},
                   {"server", address},
                   {"secret", str(a, "secret")},
                   {"lease_id", id},
                   {"node", str(a, "node")},
                   {"gpu_uuid", str(gpu, "uuid")},
                   {"sm_count", a.value("sm_count", json(nullptr))},
                   {"memory_mb", a.value("memory_mb", json(nullptr))}};
    }
  }
  if (!code.empty() && !answered && !stop_.load()) {
    // No answer within the call's time. The programs that were waiting when it began get its
    // failure (it says why: refused, unreachable, timed out). Those that asked while it was under
    // way (a loaded machine stretches a call past its first asker's acquire_timeout) are not
    // failed with a result that was never theirs: the profile is asked for again, with the same
    // key, for those with at least half their own time left. One that joined just after the call
    // began has next to none left and gets the call's answer, which tells why, not a second call
    // that its own deadline would cut short.
    const TimePoint now = Now();
    const auto enough = config_.acquire_timeout / 2;
    std::vector<uint64_t> later;
    for (uint64_t cid : waiters) {
      auto c = conns_.find(cid);
      if (c != conns_.end() && c->second->state == Conn::State::kWaiting &&
          c->second->closing == nullptr && c->second->asked_at > slot.acquire_started &&
          c->second->acquire_deadline - now >= enough) {
        later.push_back(cid);
      }
    }
    if (!later.empty()) {
      std::erase_if(waiters, [&](uint64_t cid) { return std::ranges::count(later, cid) > 0; });
      spdlog::info("no answer for {} ({}); asking again for {} program(s) that asked meanwhile",
                   slot_key, error, later.size());
      slot.waiters = std::move(later);
      StartAcquire(slot);
    }
  }
  if (!code.empty()) {
    spdlog::warn("no lease for {}: {} ({})", slot_key, error, code);
    for (uint64_t cid : waiters) {
      auto c = conns_.find(cid);
      if (c == conns_.end() || c->second->state != Conn::State::kWaiting) continue;
      FailAcquire(*c->second, code, error);
    }
    if (slot.lease_id.empty() && !slot.acquiring) slots_.erase(sit);
    return;
  }
  auto lease = std::make_unique<Lease>();
  lease->id = id;
  lease->slot_key = slot_key;
  lease->answer = reply;
  lease->server = reply["server"].get<std::string>();
  lease->next_renew = Now() + config_.RenewInterval();
  Lease& ref = *lease;
  leases_[id] = std::move(lease);
  spdlog::info("lease {} granted for {}: server {} on node {}", id, slot_key, ref.server,
               reply["node"].get<std::string>());
  if (stop_.load()) {
    StartRelease(ref, "the client manager is stopping");
    return;
  }
  slot.lease_id = id;
  for (uint64_t cid : waiters) {
    auto c = conns_.find(cid);
    if (c == conns_.end() || c->second->state != Conn::State::kWaiting ||
        c->second->closing != nullptr) {
      continue;
    }
    Attach(*c->second, ref);
  }
  if (ref.holders.empty()) ref.release_at = Now() + config_.release_after;
}

void ClientManager::Attach(Conn& conn, Lease& lease) {
  conn.state = Conn::State::kHolding;
  conn.lease_id = lease.id;
  conn.acquire_deadline = kNever;
  lease.holders.insert(conn.id);
  lease.release_at = kNever;
  ++counters_.acquires_ok;
  spdlog::info("{} uses lease {} (server {}; {} program(s) on it)", conn.Who(), lease.id,
               lease.server, lease.holders.size());
  if (!Send(conn, lease.answer)) conn.closing = "write failed";
}

void ClientManager::Detach(Conn& conn) {
  if (conn.state == Conn::State::kWaiting) {
    auto sit = slots_.find(conn.slot_key);
    if (sit != slots_.end()) std::erase(sit->second->waiters, conn.id);
  } else if (conn.state == Conn::State::kHolding) {
    auto lit = leases_.find(conn.lease_id);
    if (lit != leases_.end()) {
      Lease& lease = *lit->second;
      lease.holders.erase(conn.id);
      if (lease.holders.empty() && !lease.releasing) {
        lease.release_at = Now() + config_.release_after;
        spdlog::info("lease {}: its last program {} disconnected; released in {} unless another "
                     "comes",
                     lease.id, conn.Who(), Ms(config_.release_after));
      }
    }
  }
  conn.state = Conn::State::kDone;
}

void ClientManager::OnRenewed(const std::string& lease_id, Result<json> answer) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  Lease& lease = *it->second;
  // A release started while this renewal was under way owns the lease now (and its
  // call_in_flight): the renewal's answer changes nothing.
  if (lease.releasing) return;
  lease.call_in_flight = false;
  if (answer.ok()) {
    ++lease.renewals;
    lease.next_renew = Now() + config_.RenewInterval();
    // A lease moved to another server (flytctl remote migrate) keeps its id and secret and gets a
    // new address: programs that start from now on are sent there, and a report that the old
    // address is dead no longer matches the lease.
    const json& a = *answer;
    if (a.is_object() && a.contains("server") && a["server"].is_object() &&
        a["server"].contains("address") && a["server"]["address"].is_string()) {
      const std::string address = a["server"]["address"].get<std::string>();
      if (!address.empty() && address != lease.server) {
        spdlog::info("lease {} moved: server {} -> {}", lease_id, lease.server, address);
        lease.server = address;
        lease.answer["server"] = address;
      }
    }
    spdlog::debug("lease {} renewed", lease_id);
    return;
  }
  const std::string code = ErrorCodeOf(answer.status());
  // Gone for good: failed, ended, forgotten (not_found: past the manager's memory of ended
  // leases), or no longer ours to renew (the token revoked or changed). Programs that start
  // afterwards ask for a new lease, and hear why if that fails too.
  if (code == "lease_failed" || code == "already_ended" || code == "not_found" ||
      code == "unauthenticated" || code == "permission_denied") {
    DropLease(lease_id, code, answer.status().message());
    return;
  }
  // Transient (the cluster manager unreachable, overloaded): try again sooner than usual, while
  // the lease still has time left.
  const milliseconds retry = std::max(milliseconds(1000), config_.RenewInterval() / 4);
  spdlog::warn("renewing lease {} failed ({}); trying again in {}", lease_id,
               answer.status().message(), Ms(retry));
  lease.next_renew = Now() + retry;
}

void ClientManager::DropLease(const std::string& lease_id, const std::string& code,
                              const std::string& why) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  Lease& lease = *it->second;
  ++counters_.leases_dropped;
  spdlog::warn("lease {} is gone ({}: {}); {} program(s) on it are told, new programs get a new "
               "lease",
               lease_id, code, why, lease.holders.size());
  auto sit = slots_.find(lease.slot_key);
  if (sit != slots_.end() && sit->second->lease_id == lease_id) sit->second->lease_id.clear();
  const json event{{"event", "lease_failed"}, {"lease_id", lease_id}, {"code", code},
                   {"error", why}};
  for (uint64_t cid : lease.holders) {
    auto c = conns_.find(cid);
    if (c == conns_.end()) continue;
    c->second->state = Conn::State::kDone;
    if (!Send(*c->second, event)) c->second->closing = "write failed";
  }
  lease.holders.clear();
  if (code == "lease_failed") {
    StartRelease(lease, "its server failed");  // frees the share the cluster still holds
  } else {
    AnswerReporters(std::move(lease.dead_reporters), json{{"ok", true}, {"replaced", true}});
    leases_.erase(it);
  }
  if (sit != slots_.end() && !sit->second->acquiring && sit->second->lease_id.empty() &&
      sit->second->waiters.empty()) {
    slots_.erase(sit);
  }
}

void ClientManager::StartRelease(Lease& lease, const char* why) {
  lease.releasing = true;
  lease.release_at = kNever;
  lease.next_renew = kNever;
  auto sit = slots_.find(lease.slot_key);
  if (sit != slots_.end() && sit->second->lease_id == lease.id) {
    sit->second->lease_id.clear();
    if (!sit->second->acquiring && sit->second->waiters.empty()) slots_.erase(sit);
  }
  spdlog::info("releasing lease {}: {}", lease.id, why);
  lease.call_in_flight = true;
  Outcome outcome;
  outcome.kind = Outcome::Kind::kRelease;
  outcome.key = lease.id;
  RunCall(std::move(outcome),
          [cluster = cluster_, id = lease.id, timeout = tuning_.cluster_call_timeout] {
            Status s = cluster.Release(id, timeout);
            return s.ok() ? Result<json>(json(nullptr)) : Result<json>(s);
          });
}

void ClientManager::Timers() {
  const TimePoint now = Now();
  for (auto& [id, conn] : conns_) {
    if (conn->closing != nullptr) continue;
    if (now >= conn->first_line_deadline) {
      spdlog::warn("{} sent no request within {}; connection closed", conn->Who(),
                   Ms(tuning_.first_line_timeout));
      conn->protocol_error = true;
      conn->closing = "no request";
    } else if (conn->state == Conn::State::kWaiting && now >= conn->acquire_deadline) {
      auto sit = slots_.find(conn->slot_key);
      if (sit != slots_.end()) std::erase(sit->second->waiters, conn->id);
      FailAcquire(*conn, "unavailable",
                  "the cluster manager at " + config_.cluster_manager +
                      " granted no lease within client.acquire_timeout (" +
                      Ms(config_.acquire_timeout) + ")");
    }
  }
  std::vector<Lease*> due_release;
  for (auto& [id, lease] : leases_) {
    if (lease->releasing || lease->call_in_flight) continue;
    if (lease->holders.empty() && now >= lease->release_at) {
      due_release.push_back(lease.get());
    } else if (now >= lease->next_renew) {
      lease->call_in_flight = true;
      Outcome outcome;
      outcome.kind = Outcome::Kind::kRenew;
      outcome.key = lease->id;
      RunCall(std::move(outcome), [cluster = cluster_, lid = lease->id, ttl = config_.ttl_seconds,
                                   timeout = tuning_.cluster_call_timeout] {
        return cluster.Renew(lid, ttl, timeout);
      });
    }
  }
  for (Lease* lease : due_release) {
    StartRelease(*lease, ("no program has used it for " + Ms(config_.release_after)).c_str());
  }
}

bool ClientManager::Send(Conn& conn, const json& message) {
  const std::string text = DumpJson(message) + "\n";
  ssize_t n;
  do {
    n = ::send(conn.fd.get(), text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  // Answers are small: a socket that cannot take one whole belongs to a peer that does not read.
  return n == static_cast<ssize_t>(text.size());
}

void ClientManager::FailAcquire(Conn& conn, const std::string& code, const std::string& error) {
  ++counters_.acquires_failed;
  if (conn.state == Conn::State::kNew || conn.state == Conn::State::kWaiting) {
    (void)Send(conn, json{{"ok", false}, {"code", code}, {"error", error}});
  }
  spdlog::info("{} gets no GPU: {} ({})", conn.Who(), error, code);
  conn.state = Conn::State::kDone;
  conn.acquire_deadline = kNever;
  if (conn.closing == nullptr) conn.closing = "acquire failed";
}

// ---- calls to the cluster manager -------------------------------------------------------------

void ClientManager::RunCall(Outcome outcome, std::function<Result<json>()> call) {
  MutexLock lock(mu_);
  const uint64_t id = ++next_call_id_;
  outcome.call_id = id;
  calls_.emplace(id, std::thread([this, outcome = std::move(outcome),
                                  call = std::move(call)]() mutable {
    outcome.result = call();
    {
      MutexLock inner(mu_);
      outcomes_.push_back(std::move(outcome));
    }
    Wake();
  }));
}

void ClientManager::TakeOutcomes() {
  std::vector<Outcome> done;
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    done.swap(outcomes_);
    for (const Outcome& o : done) {
      auto it = calls_.find(o.call_id);
      if (it == calls_.end()) continue;
      threads.push_back(std::move(it->second));
      calls_.erase(it);
    }
  }
  for (std::thread& t : threads) t.join();  // each has pushed its outcome and is ending
  for (Outcome& o : done) {
    switch (o.kind) {
      case Outcome::Kind::kAcquire:
        OnAcquired(o.key, std::move(o.result), o.answered && o.answered->load());
        break;
      case Outcome::Kind::kProbe:
        OnProbed(o.key, std::move(o.result));
        break;
      case Outcome::Kind::kRenew:
        OnRenewed(o.key, std::move(o.result));
        break;
      case Outcome::Kind::kRelease: {
        auto it = leases_.find(o.key);
        if (it == leases_.end()) break;
        if (o.result.ok()) {
          ++counters_.leases_released;
          spdlog::info("lease {} released", o.key);
        } else {
          spdlog::warn("releasing lease {} failed ({}); it ends at the cluster manager when its "
                       "ttl runs out",
                       o.key, o.result.status().message());
        }
        AnswerReporters(std::move(it->second->dead_reporters),
                        json{{"ok", true}, {"replaced", true}});
        leases_.erase(it);
        // A dead server's lease is gone: its profile's new lease is asked for now.
        for (auto& [key, slot] : slots_) {
          if (slot->reacquire_after != o.key) continue;
          slot->reacquire_after.clear();
          if (stop_.load()) {
            slot->acquiring = false;
          } else {
            StartAcquire(*slot);
          }
        }
        break;
      }
    }
  }
}

void ClientManager::Publish() {
  ManagerStats stats = counters_;
  stats.connections = conns_.size();
  for (const auto& [id, lease] : leases_) {
    stats.leases.push_back({lease->id, lease->slot_key, lease->server, lease->holders.size(),
                            lease->releasing, lease->renewals});
  }
  MutexLock lock(mu_);
  stats.loop_passes = published_.loop_passes + 1;
  published_ = std::move(stats);
}

}  // namespace flyt::client_manager
