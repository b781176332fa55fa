#include "remote_client/client_core.h"

#include <pthread.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace flyt::remote {
namespace {

CudaStatus Error(CudaError code, std::string message) { return {code, std::move(message)}; }

spdlog::level::level_enum LevelFromEnv() {
  const char* text = std::getenv("FLYT_LOG_LEVEL");
  if (text == nullptr || *text == '\0') return spdlog::level::warn;
  return spdlog::level::from_str(text);
}

// The lease the machine's flyt-client-manager gives this process (FLYT_CLIENT_MANAGER...).
// `dead`: a session whose server could not be reached, reported to the manager and replaced.
CudaResult<std::unique_ptr<ManagerSession>> LeaseFromClientManager(
    std::unique_ptr<ManagerSession> dead = nullptr) {
  FLYT_CUDA_ASSIGN_OR_RETURN(
      DiscoveryOptions options,
      DiscoveryOptions::FromEnvironment([](const char* name) { return std::getenv(name); }));
  options.program = program_invocation_short_name;
  options.pid = static_cast<uint32_t>(::getpid());
  if (dead) return ManagerSession::ReplaceDeadServer(std::move(dead), options);
  return ManagerSession::Acquire(options);
}

void FlushAtExit() {
  // Posted work still in the send buffer goes out before the process ends.
  try {
    if (Connection* conn = ClientCore::Process().connected()) (void)conn->Flush();
  } catch (...) {
  }
}

}  // namespace

ClientCore::ClientCore() {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  log_ = std::make_shared<spdlog::logger>("flyt", sink);
  log_->set_pattern("[flyt %l] %v");
  log_->set_level(LevelFromEnv());
  std::atexit(FlushAtExit);
  // A forked child shares its parent's socket: writing to it (its own calls, or the posted work
  // FlushAtExit would send again) would corrupt the parent's stream. The child is cut off.
  ::pthread_atfork(nullptr, nullptr, [] {
    ClientCore& core = ClientCore::Process();
    if (core.conn_.load() != nullptr) core.forked_child_.store(true);
  });
}

std::string ClientCore::ProgramLabel() {
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  return std::string(program_invocation_short_name) + " on " + host + " (pid " +
         std::to_string(::getpid()) + ")";
}

void ClientCore::ReportFailure(const CudaStatus& status) {
  if (status.code() == CudaError::kDevicesUnavailable && !loss_logged_.exchange(true)) {
    log_->error("{}", status.message());
    return;
  }
  log_->debug("{}", status.ToString());
}

int ClientCore::driver_version() {
  CudaResult<Connection*> conn = Connect();
  return conn.ok() ? (*conn)->server().driver_version : 0;
}

void ClientCore::AddDeviceRange(uint64_t ptr, uint64_t bytes, bool global) {
  MutexLock lock(objects_mu_);
  device_ranges_.Add(ptr, bytes, global ? 1 : 0);
}

bool ClientCore::RemoveDeviceAllocation(uint64_t ptr) {
  MutexLock lock(objects_mu_);
  auto range = device_ranges_.Find(ptr);
  if (!range || range->base != ptr || range->value != 0) return false;
  device_ranges_.Remove(ptr);
  return true;
}

std::optional<std::pair<uint64_t, uint64_t>> ClientCore::FindDeviceRange(uint64_t ptr) const {
  MutexLock lock(objects_mu_);
  auto range = device_ranges_.Find(ptr);
  if (!range) return std::nullopt;
  return std::make_pair(range->base, range->size);
}

bool ClientCore::IsDeviceRange(uint64_t ptr, uint64_t bytes) const {
  MutexLock lock(objects_mu_);
  return device_ranges_.Contains(ptr, bytes);
}

void ClientCore::ClearDeviceRanges() {
  MutexLock lock(objects_mu_);
  device_ranges_.Clear();
}

void ClientCore::AddHandle(const void* handle, uint64_t id) {
  MutexLock lock(objects_mu_);
  handles_[handle] = id;
}

void ClientCore::RemoveHandle(const void* handle) {
  MutexLock lock(objects_mu_);
  handles_.erase(handle);
}

uint64_t ClientCore::HandleId(const void* handle) const {
  MutexLock lock(objects_mu_);
  auto it = handles_.find(handle);
  return it == handles_.end() ? 0 : it->second;
}

void ClientCore::ClearHandles() {
  MutexLock lock(objects_mu_);
  handles_.clear();
}

CudaResult<Connection*> ClientCore::Connect() {
  if (Connection* conn = conn_.load()) {
    if (!forked_child_.load(std::memory_order_relaxed)) return conn;
    return Error(CudaError::kInitializationError,
                 "this process was forked from one that used the flyt GPU server; a forked child "
                 "cannot use its parent's connection (nor, with NVIDIA's driver, its parent's "
                 "CUDA context)");
  }
  MutexLock lock(mu_);
  if (connection_) return connection_.get();
  if (connect_error_) return *connect_error_;
  return OpenLocked();
}

CudaResult<Connection*> ClientCore::OpenLocked() {
  const char* server = std::getenv("FLYT_SERVER");
  std::string address = server != nullptr ? server : "";
  std::string source = "FLYT_SERVER=" + address;
  std::unique_ptr<ManagerSession> session;
  if (address.empty()) {
    // No server named: the machine's flyt-client-manager leases one (server_discovery.h).
    CudaResult<std::unique_ptr<ManagerSession>> leased = LeaseFromClientManager();
    if (!leased.ok()) {
      log_->error("{}", leased.status().message());
      // No room now is worth another try later; anything else is remembered.
      if (leased.status().code() != CudaError::kDevicesUnavailable) {
        connect_error_ = leased.status();
      }
      return leased.status();
    }
    session = std::move(leased).value();
    address = session->server().address;
    source = "the GPU server " + address + " of lease " + session->server().lease_id;
  }
  Result<Endpoint> endpoint = ParseEndpoint(address);
  if (!endpoint.ok()) {
    connect_error_ =
        Error(CudaError::kInitializationError, source + ": " + endpoint.status().message());
    log_->error("{}", connect_error_->message());
    return *connect_error_;
  }
  ClientOptions options;
  const char* shm = std::getenv("FLYT_SHM");
  options.shared_memory = shm == nullptr || std::string_view(shm) != "0";
  options.label = ProgramLabel();
  options.pid = static_cast<uint32_t>(::getpid());
  options.runtime_version = kClientCudaVersion;
  // Live migration: one line each time an operator moves this program to another server.
  options.note = [log = log_](bool failed, const std::string& line) {
    if (failed) {
      log->warn("{}", line);
    } else {
      log->info("{}", line);
    }
  };
  if (session) {
    options.secret = session->server().secret;
  } else if (const char* secret = std::getenv("FLYT_SERVER_SECRET")) {
    options.secret = secret;
  }
  Result<std::unique_ptr<Connection>> conn = Connection::Open(*endpoint, options);
  if (!conn.ok() && session && ServerOutOfReach(conn.status().message())) {
    // The leased server is gone (crashed): the client manager checks, replaces the lease, and
    // this process tries the new server once. Otherwise the connect error below stands.
    log_->warn("cannot connect to {} ({}); asking the flyt-client-manager for another server",
               source, conn.status().message());
    CudaResult<std::unique_ptr<ManagerSession>> next = LeaseFromClientManager(std::move(session));
    if (!next.ok()) {
      log_->warn("{}", next.status().message());
    } else {
      session = std::move(next).value();
      address = session->server().address;
      source = "the GPU server " + address + " of lease " + session->server().lease_id;
      endpoint = ParseEndpoint(address);
      if (!endpoint.ok()) {
        connect_error_ =
            Error(CudaError::kInitializationError, source + ": " + endpoint.status().message());
        log_->error("{}", connect_error_->message());
        return *connect_error_;
      }
      options.secret = session->server().secret;
      conn = Connection::Open(*endpoint, options);
    }
  }
  if (!conn.ok() && conn.status().code() == StatusCode::kResourceExhausted) {
    // The server serves as many clients as it may (--max-clients). Not kept: a later call
    // tries again, and may be served once another client has gone.
    CudaStatus busy = Error(CudaError::kDevicesUnavailable,
                            "the flyt GPU server at " + endpoint->ToString() +
                                " serves no more clients now: " + conn.status().message());
    log_->error("{}", busy.message());
    return busy;
  }
  if (!conn.ok() && conn.status().reason() == "unauthenticated") {
    connect_error_ = Error(CudaError::kInitializationError,
                           "the flyt GPU server at " + endpoint->ToString() +
                               " refused this client: wrong or missing secret (FLYT_SERVER_SECRET "
                               "must be the secret of the server's lease)");
    log_->error("{}", connect_error_->message());
    return *connect_error_;
  }
  if (!conn.ok()) {
    connect_error_ = Error(CudaError::kInitializationError, "cannot use the flyt GPU server at " +
                                                                endpoint->ToString() + ": " +
                                                                conn.status().message());
    log_->error("{}", connect_error_->message());
    return *connect_error_;
  }
  connection_ = std::move(conn).value();
  if (session) {
    log_->info("flyt-client-manager on {}: lease {} on node {} (GPU {})", session->socket_path(),
               session->server().lease_id, session->server().node, session->server().gpu_uuid);
    session->Watch(log_);
    manager_session_ = std::move(session);
  }
  const ServerInfo& info = connection_->server();
  log_->info("connected to {} at {} (backend {}{}, over {}), client {}", info.label,
             endpoint->ToString(), info.backend, info.simulated ? ", SIMULATED device" : "",
             connection_->transport(), info.client_id);
  if (!connection_->transport_note().empty()) log_->info("{}", connection_->transport_note());
  conn_.store(connection_.get());
  return connection_.get();
}

}  // namespace flyt::remote
