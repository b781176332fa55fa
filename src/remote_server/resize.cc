// Resizing a running flyt-gpu-server (ResizeServer; `flyt-gpu-server resize`).
//
// The operator's call (over the Unix socket, by the server's own user or root) checks the values,
// puts a new memory limit into the shared client table, where every client's TryReserve sees it
// at once, and posts a new SM share there as a generation-stamped value. Each client's thread or
// process compares that generation before it handles its next call, a clean point (the previous
// call has returned; the session waits for the client's posted device work itself), applies the
// share through its Session (ApplySmShare) and records the SMs granted and the pause in its slot.
// The operator's call waits for the clients connected when it was asked, up to its timeout; an
// idle client stays pending and applies the share at its next call. A client that connects later
// applies the current share when its session opens.
//
// The sim applies a share to any client. The driver cannot move a live client's context (its
// memory and modules belong to it): such a client refuses, and is reported as not applied, with
// the reason; a client with nothing on the device yet moves to a context made with the share.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <spdlog/spdlog.h>
#include <thread>

#include "remote_server/connection.h"

namespace flyt::remote {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t MicrosSince(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

}  // namespace

CudaStatus ClientConnection::CheckOperator(std::string_view what) const {
  ucred peer{};
  socklen_t len = sizeof peer;
  if (channel_->Kind() == "tcp" ||
      ::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 ||
      (peer.uid != 0 && peer.uid != ::getuid())) {
    return Error(CudaError::kNotPermitted, "only the server's own user or root may " +
                                               std::string(what) + ", over its Unix socket");
  }
  return CudaStatus::Ok();
}

void ClientConnection::StartSmShare() {
  sm_count_granted_ = backend_->Identity().sm_count_granted;
  if (sm_count_granted_ <= 0) {
    CudaResult<int32_t> sms = backend_->DeviceAttribute(16);  // multiProcessorCount
    sm_count_granted_ = sms.ok() ? *sms : 0;
  }
  sm_share_generation_ = 0;
  ClientRegistry::NoteSmShare(slot_, {0, false, static_cast<uint32_t>(sm_count_granted_), 0, ""});
  MaybeApplySmShare();
}

void ClientConnection::MaybeApplySmShare() {
  const SmShareOrder order = server_.registry_->CurrentSmShare();
  if (order.generation == sm_share_generation_ || session_ == nullptr) return;
  sm_share_generation_ = order.generation;
  SmShareState state;
  state.generation = order.generation;
  const Clock::time_point start = Clock::now();
  int granted = 0;
  CudaStatus applied = session_->ApplySmShare(static_cast<int>(order.sm_count), &granted);
  state.pause_us = MicrosSince(start);
  if (applied.ok()) {
    if (arena_registered_) {  // a new context: register the arena in it
      arena_registered_ = false;
      RegisterArena();
    }
    spdlog::info("{}: runs on {} SMs now (asked {}; {} us)", Tag(), granted, order.sm_count,
                 state.pause_us);
    // A runtime of version 7 caches device facts: told before the next reply, it fetches them
    // again.
    if (granted != sm_count_granted_ && client_version_ >= 7 && !importing_) share_notice_ = true;
    sm_count_granted_ = granted;
  } else {
    state.refused = true;
    state.message = "client " + std::to_string(id_) + " runs on with " +
                    std::to_string(sm_count_granted_) + " SMs: " + applied.message();
    spdlog::warn("{}: keeps its {} SMs (asked {}): {}", Tag(), sm_count_granted_, order.sm_count,
                 applied.ToString());
  }
  state.sm_count_granted = static_cast<uint32_t>(sm_count_granted_);
  ClientRegistry::NoteSmShare(slot_, state);
}

CudaResult<ResizeServerReply> ClientConnection::Handle(const ResizeServerRequest& r, Io&) {
  // A resize changes what every client of the server runs with: the same people who may move
  // clients may ask for it.
  FLYT_CUDA_RETURN_IF_ERROR(CheckOperator("resize the server"));
  ClientRegistry& registry = *server_.registry_;
  const DeviceIdentity identity = backend_->Identity();
  const uint32_t total = static_cast<uint32_t>(std::max(identity.sm_count_total, 0));
  if (r.sm_count == 0 && !r.set_memory_limit) {
    return Error(CudaError::kInvalidValue, "a resize needs an SM count or a memory limit");
  }
  if (r.sm_count != 0 && r.sm_count > total) {
    return Error(CudaError::kInvalidValue, "an SM count of " + std::to_string(r.sm_count) +
                                               " is outside 1.." + std::to_string(total) +
                                               " (the device's SMs)");
  }
  if (r.set_memory_limit) {
    if (std::optional<uint64_t> held = registry.SetLimitBytes(r.memory_limit_bytes)) {
      return Error(CudaError::kInvalidValue,
                   "a memory limit of " + std::to_string(r.memory_limit_bytes >> 20) +
                       " MiB is below the " + std::to_string((*held + (1 << 20) - 1) >> 20) +
                       " MiB the clients hold now; nothing was changed");
    }
    spdlog::info("{}: the server's memory limit is {} MiB now", Tag(),
                 r.memory_limit_bytes >> 20);
  }
  ResizeServerReply reply;
  reply.sm_count_total = total;
  reply.sm_count_asked = r.sm_count;
  std::vector<std::pair<uint64_t, ClientSlot*>> clients;
  for (uint64_t id : registry.LiveIds()) {
    if (id == id_) continue;  // the operator's own connection
    if (ClientSlot* slot = registry.FindLive(id)) clients.emplace_back(id, slot);
  }
  reply.clients = static_cast<uint32_t>(clients.size());
  std::string refusal;
  uint32_t gone = 0;
  if (r.sm_count == 0) {
    reply.clients_applied = reply.clients;  // the limit holds for everyone at once
    reply.sm_count_granted = static_cast<uint32_t>(std::max(sm_count_granted_, 0));
  } else {
    const uint32_t generation = registry.PostSmShare(r.sm_count);
    spdlog::info("{}: asks every client to run on {} SMs (generation {})", Tag(), r.sm_count,
                 generation);
    // This connection is at a clean point itself: what it is granted is what a client of this
    // backend gets.
    MaybeApplySmShare();
    const SmShareState own = ClientRegistry::SmShareOf(slot_);
    if (own.generation == generation && !own.refused) reply.sm_count_granted = own.sm_count_granted;
    const auto timeout = std::chrono::milliseconds(std::min<uint32_t>(r.timeout_ms, 3'600'000));
    const Clock::time_point deadline = Clock::now() + timeout;
    std::vector<bool> done(clients.size(), false);
    while (true) {
      size_t open = 0;
      for (size_t i = 0; i < clients.size(); ++i) {
        if (done[i]) continue;
        auto [id, slot] = clients[i];
        const SmShareState state = ClientRegistry::SmShareOf(slot);
        if (registry.FindLive(id) != slot) {
          done[i] = true;
          ++gone;
        } else if (state.generation >= generation) {
          done[i] = true;
          reply.pause_us_max = std::max(reply.pause_us_max, state.pause_us);
          if (state.refused) {
            if (refusal.empty()) refusal = state.message;
          } else {
            reply.clients_applied += 1;
            if (reply.sm_count_granted == 0) reply.sm_count_granted = state.sm_count_granted;
          }
        } else {
          ++open;
        }
      }
      if (open == 0 || Clock::now() >= deadline) {
        reply.clients_pending = static_cast<uint32_t>(open);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  reply.memory_limit_bytes = registry.limit_bytes();
  reply.allocated_bytes = registry.used_bytes();

  std::string message;
  if (r.sm_count != 0) {
    message = std::to_string(reply.clients_applied) + " of " + std::to_string(reply.clients) +
              " clients run on " +
              (reply.sm_count_granted != 0 ? std::to_string(reply.sm_count_granted)
                                           : std::string("a share of ") +
                                                 std::to_string(r.sm_count)) +
              " SMs now";
    if (reply.clients_pending != 0) {
      message += "; " + std::to_string(reply.clients_pending) +
                 " made no call in time and apply it at their next call";
    }
    const uint32_t refused = reply.clients - reply.clients_applied - reply.clients_pending - gone;
    if (refused != 0) {
      message += "; " + std::to_string(refused) + " could not apply it (" + refusal + ")";
    }
    if (gone != 0) message += "; " + std::to_string(gone) + " went away";
    message += "; clients that connect from now on get it";
  }
  if (r.set_memory_limit) {
    if (!message.empty()) message += "; ";
    message += reply.memory_limit_bytes == 0
                   ? std::string("no memory limit")
                   : "a memory limit of " + std::to_string(reply.memory_limit_bytes >> 20) +
                         " MiB";
    message += " (" + std::to_string(reply.allocated_bytes >> 20) + " MiB allocated)";
  }
  reply.message = std::move(message);
  return reply;
}

CudaResult<ClientSharesReply> ClientConnection::Handle(const ClientSharesRequest&, Io&) {
  return ClientSharesReply{server_.registry_->Shares()};
}

}  // namespace flyt::remote
