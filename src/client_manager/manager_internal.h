// The client manager's insides, shared by the files that implement ClientManager (manager.cc:
// the loop, programs, leases and calls to the cluster manager; dead_servers.cc: programs' reports
// that their server is dead, and the check of that address). Not part of the library's interface.
// The records below belong to the manager's loop thread: only it reads or changes them.
#pragma once

#include <sys/types.h>
#include <sys/un.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "client_manager/manager.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace flyt::client_manager {
namespace internal {

using TimePoint = std::chrono::steady_clock::time_point;
inline constexpr TimePoint kNever = TimePoint::max();

// "1500 ms": a duration as the log lines and answers write it.
inline std::string Ms(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// The address of a Unix socket at `path` (cut to sun_path's size; callers check the length).
sockaddr_un UnixAddress(const std::string& path);

// What connecting to a GPU server's address (HOST:PORT, [V6]:PORT or unix:PATH) says about it:
// {"verdict": "alive" | "dead" | "unknown", "why": ...}. Dead is only a definite no — the
// connection refused, the socket file gone — never a slow answer or an unreachable network.
nlohmann::json ProbeServer(const std::string& address, std::chrono::milliseconds timeout);

}  // namespace internal

using internal::kNever;
using internal::TimePoint;

struct ClientManager::Conn {
  enum class State { kNew, kWaiting, kHolding, kDone };
  uint64_t id = 0;
  UniqueFd fd;
  std::string in;
  pid_t peer_pid = 0;
  uid_t peer_uid = 0;
  std::string program;
  State state = State::kNew;
  TimePoint first_line_deadline = kNever;
  TimePoint acquire_deadline = kNever;
  TimePoint asked_at = kNever;  // when it asked for its lease (kWaiting)
  std::string slot_key;  // kWaiting
  std::string lease_id;  // kHolding
  const char* closing = nullptr;  // why, once it is to be closed at the end of the pass
  bool protocol_error = false;
  bool reported = false;  // sent its one server_dead report

  std::string Who() const {
    return (program.empty() ? std::string("a program") : "'" + program + "'") + " (pid " +
           std::to_string(peer_pid) + ", uid " + std::to_string(peer_uid) + ")";
  }
};

struct ClientManager::Slot {
  std::string key;
  LeaseProfile profile;
  bool acquiring = false;
  TimePoint acquire_started = kNever;  // when the call under way (acquiring) began
  std::string lease_id;  // the lease new programs get; empty when none
  std::string reacquire_after;  // a dead server's lease: ask for a new one once it is released
  std::vector<uint64_t> waiters;
};

struct ClientManager::Lease {
  std::string id;
  std::string slot_key;
  nlohmann::json answer;  // what each program is told
  std::string server;
  std::set<uint64_t> holders;
  TimePoint next_renew = kNever;
  TimePoint release_at = kNever;  // set while no program holds it
  bool call_in_flight = false;
  bool releasing = false;
  uint64_t renewals = 0;
  bool probing = false;  // its server, reported dead, is being checked
  std::vector<uint64_t> dead_reporters;  // connections waiting for the probe's verdict
};

struct ClientManager::Outcome {
  enum class Kind { kAcquire, kRenew, kRelease, kProbe };
  Kind kind = Kind::kAcquire;
  std::string key;  // slot key (acquire) or lease id
  Result<nlohmann::json> result = Status(StatusCode::kInternal, "no outcome");
  uint64_t call_id = 0;
  std::shared_ptr<std::atomic<bool>> answered;  // acquire: the last attempt got an answer
};

}  // namespace flyt::client_manager
