// Live migration of a client between flyt-gpu-servers (see connection.h, "Live migration").
//
// The operator's MigrateClient call (any connection) posts an order into the client's slot of
// the shared client table and waits for the outcome there. The client's own thread or process
// sees the order before its next reply and sends a kNotice with it; the client, once that call
// has returned and with nothing else in flight, calls Migrate. That is the clean point: the
// server waits for the device, opens an import link to the other server (a hello with
// kCapMigrationImport and that server's secret), and replays the client's state over it as a
// client would make it — MallocAt for each allocation at its own address, memory pools and which
// allocations are their live blocks (PoolBlockAt), the modules from their images, functions and
// the attributes set on them, globals at their own addresses, streams, events, graph execs — then the bytes of every allocation and global, then ImportFinish, whose
// answer is the token the client says hello with over there. Everything on this side is only
// read: when anything fails before ImportFinish has answered, the link is closed (the other side
// releases what it made) and the client goes on here, told why. Once it answered, this side
// answers Migrate with where to go, ends the connection and frees what the client held.
//
// On the other side the import link is an ordinary connection whose hello carried
// kCapMigrationImport (its creates are the ordinary handlers; MallocAt, ModuleGetGlobalAt and
// ImportFinish exist only there). After ImportFinish it stops reading the link and waits on the
// hand-over pair for the client's own hello, which the supervisor passes over with its socket
// (Server::HandOver); the token is checked here, in constant time. Within
// ServerOptions::claim_timeout, or what it made is released.
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <spdlog/spdlog.h>
#include <thread>

#include "common/strings.h"
#include "remote_client/client.h"
#include "remote_server/connection.h"

namespace flyt::remote {

namespace {

using Clock = std::chrono::steady_clock;

// The device memory moved in one copy call (a host buffer of this size when the backend has no
// host view of it).
constexpr uint64_t kMoveChunkBytes = 64ull << 20;

std::string RandomHex(size_t bytes) {
  std::string out;
  unsigned char buf[32];
  bytes = std::min(bytes, sizeof buf);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(buf + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < got; ++i) {
    out.push_back(kHex[buf[i] >> 4]);
    out.push_back(kHex[buf[i] & 15]);
  }
  return out;
}

}  // namespace

// ---- the operator's request ------------------------------------------------------------------

CudaResult<MigrateClientReply> ClientConnection::Handle(const MigrateClientRequest& r, Io&) {
  // Moving a client sends its device memory wherever the request says: only the server's own
  // user (or root) may ask, over the Unix socket, not any holder of the server's secret.
  FLYT_CUDA_RETURN_IF_ERROR(CheckOperator("move clients"));
  if (r.client_id == id_) {
    return Error(CudaError::kInvalidValue, "a connection cannot move itself");
  }
  if (Result<Endpoint> to = ParseEndpoint(r.endpoint); !to.ok()) {
    return Error(CudaError::kInvalidValue, "the new server's address: " + to.status().message());
  }
  if (r.secret.size() > kMaxSecretBytes) {
    return Error(CudaError::kInvalidValue, "the new server's secret is too long");
  }
  ClientSlot* slot = server_.registry_->FindLive(r.client_id);
  if (slot == nullptr) {
    return Error(CudaError::kInvalidValue,
                 "no client " + std::to_string(r.client_id) + " is connected to this server");
  }
  if (!ClientRegistry::PostMigration(slot, {r.endpoint, r.secret})) {
    return Error(CudaError::kNotReady,
                 "client " + std::to_string(r.client_id) + " is being moved already");
  }
  spdlog::info("{}: asks client {} to move to {}", Tag(), r.client_id, r.endpoint);
  const auto timeout = std::chrono::milliseconds(std::clamp<uint32_t>(r.timeout_ms, 100, 3'600'000));
  const Clock::time_point deadline = Clock::now() + timeout;
  MigrateClientReply reply;
  while (true) {
    MigrationOutcome outcome = ClientRegistry::Migration(slot);
    if (outcome.state == MigrationState::kMoved || outcome.state == MigrationState::kFailed) {
      reply.outcome = outcome.state == MigrationState::kMoved ? "moved" : "failed";
      reply.message = outcome.message;
      reply.new_client_id = outcome.new_client_id;
      reply.bytes = outcome.bytes;
      reply.pause_us = outcome.pause_us;
      return reply;
    }
    if ((outcome.state != MigrationState::kRequested &&
         outcome.state != MigrationState::kRunning) ||
        server_.registry_->FindLive(r.client_id) != slot) {
      reply.outcome = "failed";
      reply.message = outcome.state == MigrationState::kRunning
                          ? "the process serving client " + std::to_string(r.client_id) +
                                " ended in the middle of the move; the client lost its connection"
                          : "the client went away before it moved";
      return reply;
    }
    if (Clock::now() >= deadline && ClientRegistry::WithdrawMigration(slot)) {
      reply.outcome = "pending";
      reply.message = "client " + std::to_string(r.client_id) + " made no call within " +
                      std::to_string(timeout.count()) +
                      " ms (a client moves at a call, with nothing in flight); nothing was moved "
                      "and the request is withdrawn";
      return reply;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status ClientConnection::MaybeNotice() {
  if (share_notice_) {  // resize.cc: the client runs on a new SM share
    share_notice_ = false;
    std::byte head[kFrameHeaderBytes];
    EncodeFrameHeader({0, CallId::kResizeServer, FrameKind::kNotice, 0}, head);
    FLYT_RETURN_IF_ERROR(channel_->Write(std::span<const std::byte>(head, sizeof head)));
  }
  if (notice_sent_ || !ClientRegistry::MigrationRequested(slot_)) return Status::Ok();
  if (importing_ || client_version_ < 6 || (client_caps_ & kCapMigration) == 0) {
    if (ClientRegistry::TakeMigration(slot_)) {
      MigrationOutcome outcome;
      outcome.state = MigrationState::kFailed;
      outcome.message = importing_ ? "it is being moved in itself"
                                   : "its runtime cannot move (protocol version " +
                                         std::to_string(client_version_) +
                                         " without live migration)";
      ClientRegistry::FinishMigration(slot_, outcome);
    }
    return Status::Ok();
  }
  notice_sent_ = true;
  std::byte head[kFrameHeaderBytes];
  EncodeFrameHeader({0, CallId::kNone, FrameKind::kNotice, 0}, head);
  return channel_->Write(std::span<const std::byte>(head, sizeof head));
}

// ---- moving a client away --------------------------------------------------------------------

std::string ClientConnection::Unmovable() const {
  if (importing_) return "it is being moved in itself";
  if (ipc_exported_ || !ipc_imports_.empty()) {
    return "it shares device memory or events with other processes (cudaIpc*)";
  }
  bool plain = true;
  allocations_.ForEach([&](uint64_t, uint64_t, uint8_t kind) { plain &= kind == kPlainAllocation; });
  if (!plain) return "it holds managed memory (cudaMallocManaged)";
  if (arrays_.size() != 0 || mipmaps_.size() != 0 || textures_.size() != 0 ||
      surfaces_.size() != 0) {
    return "it holds CUDA arrays, textures or surfaces";
  }
  return "";
}

CudaResult<ClientConnection::MoveResult> ClientConnection::MoveTo(const MigrationOrder& order) {
  auto fail = [](const std::string& why) { return CudaStatus(CudaError::kUnknown, why); };
  if (std::string why = Unmovable(); !why.empty()) return fail("it cannot move: " + why);
  // The clean point: nothing of the client's runs on the device any more.
  if (CudaStatus s = session_->DeviceSynchronize(); !s.ok()) {
    return fail("its device work failed: " + s.ToString());
  }
  for (auto& [id, pool] : pools_) ReleaseCached(pool, 0);
  Result<Endpoint> endpoint = ParseEndpoint(order.endpoint);
  if (!endpoint.ok()) return fail(endpoint.status().message());
  ClientOptions options;
  options.label = label_ + " (moving from " + server_.options_.label + ")";
  options.pid = pid_;
  options.capabilities = (kAllCapabilities | kCapMigrationImport) & ~uint64_t{kCapSharedMemory};
  options.secret = order.secret;
  options.shared_memory = false;
  Result<std::unique_ptr<Connection>> opened = Connection::Open(*endpoint, options);
  if (!opened.ok()) return fail("cannot reach " + order.endpoint + ": " + opened.status().message());
  Connection& link = **opened;
  if ((link.server().capabilities & kCapMigrationImport) == 0) {
    return fail("the server at " + order.endpoint + " does not take clients in (protocol version " +
                std::to_string(link.server().version) + ")");
  }
  // The first error of anything sent so far, posted calls included.
  auto check = [&](const CudaStatus& s, const std::string& what) -> CudaStatus {
    if (!s.ok()) return fail(what + " on the new server: " + s.ToString());
    if (std::optional<AsyncError> e = link.TakeAsyncError()) {
      return fail(std::string(CallName(e->call)) + " on the new server: " + e->status.ToString());
    }
    return CudaStatus::Ok();
  };

  // Memory pools need a server that takes them in (PoolBlockAt), known before anything is placed.
  const bool pooled = !pool_allocations_.empty() ||
                      std::any_of(pools_.begin(), pools_.end(),
                                  [](const auto& p) { return p.first != 0; });
  if (pooled && link.server().version < MinProtocolVersionOf(CallId::kPoolBlockAt)) {
    return fail("it uses memory pools, which the server at " + order.endpoint +
                " cannot take in (protocol version " + std::to_string(link.server().version) +
                ")");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  allocations_.ForEach([&](uint64_t base, uint64_t size, uint8_t) { ranges.emplace_back(base, size); });
  for (auto [base, size] : ranges) {
    FLYT_CUDA_RETURN_IF_ERROR(check(link.MallocAt({base, size}).status(),
                                    std::to_string(size) + " bytes at " + Hex(base)));
  }
  // Memory pools (version 9): the client's own with their handles, limits and attributes, the
  // default pool's attributes, and which of the allocations just placed are live blocks of which
  // pool. Cached blocks were released above; high-water marks start again from the current use.
  for (const auto& [id, pool] : pools_) {
    if (id != 0) {
      FLYT_CUDA_RETURN_IF_ERROR(check(link.MemPoolCreate({id, pool.max_bytes}), "a memory pool"));
    }
    for (uint32_t attr = 1; attr <= 3; ++attr) {
      FLYT_CUDA_RETURN_IF_ERROR(
          check(link.MemPoolSetAttribute({id, attr, pool.reuse[attr - 1]}).status(),
                "a memory pool's attribute"));
    }
    FLYT_CUDA_RETURN_IF_ERROR(
        check(link.MemPoolSetAttribute({id, 4, pool.release_threshold}).status(),
              "a memory pool's release threshold"));
  }
  for (const auto& [ptr, live] : pool_allocations_) {
    FLYT_CUDA_RETURN_IF_ERROR(
        check(link.PoolBlockAt({live.pool, ptr}).status(), "a pool block at " + Hex(ptr)));
  }
  for (const auto& [id, pool] : pools_) {
    if (id != 0 && pool.destroyed) {
      FLYT_CUDA_RETURN_IF_ERROR(check(link.MemPoolDestroy({id}), "a destroyed memory pool"));
    }
  }
  std::vector<std::pair<uint64_t, const Module*>> modules;
  modules_.ForEach([&](uint64_t id, const Module& m) { modules.emplace_back(id, &m); });
  for (auto [id, m] : modules) {
    FLYT_CUDA_RETURN_IF_ERROR(
        check(link.ModuleLoad({id, m->image.size(), m->label}, m->image), "module " + m->label));
  }
  std::vector<std::pair<uint64_t, const Function*>> functions;
  functions_.ForEach([&](uint64_t id, const Function& f) { functions.emplace_back(id, &f); });
  for (auto [id, f] : functions) {
    FLYT_CUDA_RETURN_IF_ERROR(check(link.ModuleGetFunction({f->module, id, f->name}), f->name));
    for (auto [attr, value] : f->attributes) {
      FLYT_CUDA_RETURN_IF_ERROR(
          check(link.FuncSetAttribute({id, attr, value}).status(), "an attribute of " + f->name));
    }
  }
  for (const auto& [key, global] : global_cache_) {
    FLYT_CUDA_RETURN_IF_ERROR(
        check(link.ModuleGetGlobalAt({key.first, key.second, global.bytes, global.ptr}).status(),
              "global " + key.second));
    if (global.bytes != 0) ranges.emplace_back(global.ptr, global.bytes);
  }
  std::vector<uint64_t> ids;
  streams_.ForEach([&](uint64_t id, const StreamHandle&) { ids.push_back(id); });
  for (uint64_t id : ids) {
    auto params = stream_params_.find(id);
    uint32_t flags = params == stream_params_.end() ? 0 : params->second.first;
    int32_t priority = params == stream_params_.end() ? 0 : params->second.second;
    FLYT_CUDA_RETURN_IF_ERROR(check(link.StreamCreate({id, flags, priority}), "a stream"));
  }
  ids.clear();
  events_.ForEach([&](uint64_t id, const EventHandle&) { ids.push_back(id); });
  for (uint64_t id : ids) {
    auto flags = event_flags_.find(id);
    FLYT_CUDA_RETURN_IF_ERROR(
        check(link.EventCreate({id, flags == event_flags_.end() ? 0u : flags->second}), "an event"));
  }
  std::vector<std::pair<uint64_t, const GraphExec*>> graphs;
  graph_execs_.ForEach([&](uint64_t id, const GraphExec& g) { graphs.emplace_back(id, &g); });
  for (auto [id, g] : graphs) {
    FLYT_CUDA_RETURN_IF_ERROR(check(link.GraphExecCreate({id, g->nodes}), "a graph"));
  }

  // The bytes, straight from the backend's host view where it has one.
  uint64_t moved = 0;
  Bytes staging;
  for (auto [base, size] : ranges) {
    for (uint64_t off = 0; off < size; off += kMoveChunkBytes) {
      const uint64_t n = std::min(kMoveChunkBytes, size - off);
      std::byte* view = session_->HostView(base + off, n);
      if (view == nullptr) {
        staging.resize(n);
        FLYT_CUDA_RETURN_IF_ERROR(check(
            session_->MemcpyDtoH(std::span(staging.data(), n), base + off, kDefaultStream),
            "reading device memory here"));
        view = staging.data();
      }
      FLYT_CUDA_RETURN_IF_ERROR(check(
          link.MemcpyHtoDAsync({base + off, n, 0}, std::span<const std::byte>(view, n)),
          "copying " + Hex(base + off)));
      moved += n;
      if (server_.options_.test_exit_after_export_bytes != 0 &&
          moved >= server_.options_.test_exit_after_export_bytes) {
        spdlog::warn("{}: test fault: the process exits in the middle of a move", Tag());
        if (std::shared_ptr<spdlog::logger> logger = spdlog::default_logger()) logger->flush();
        ::_exit(1);
      }
    }
  }
  // Where a client on this host can reach the new server over its Unix socket (and so over
  // shared memory again): asked before ImportFinish, after which the link is not read.
  std::string local_path;
  if (CudaResult<LocalEndpointReply> local = link.LocalEndpoint({});
      local.ok() && !local->path.empty() && local->path.find(',') == std::string::npos &&
      !local->boot_id.empty() && local->boot_id == HostBootId()) {
    local_path = local->path;
  }
  CudaResult<ImportFinishReply> finished = link.ImportFinish({});
  FLYT_CUDA_RETURN_IF_ERROR(check(finished.status(), "finishing the move"));
  return MoveResult{finished->token, link.server().client_id, moved, local_path};
}

CudaResult<MigrateReply> ClientConnection::Handle(const MigrateRequest&, Io&) {
  notice_sent_ = false;
  std::optional<MigrationOrder> order = ClientRegistry::TakeMigration(slot_);
  if (!order) return MigrateReply{"", "", "no move was asked for (or it was withdrawn)"};
  const Clock::time_point start = Clock::now();
  CudaResult<MoveResult> moved = MoveTo(*order);
  MigrationOutcome outcome;
  outcome.pause_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
  if (!moved.ok()) {
    outcome.state = MigrationState::kFailed;
    outcome.message = "client " + std::to_string(id_) + " stays here: " + moved.status().message();
    spdlog::warn("{}: not moved to {}: {}", Tag(), order->endpoint, moved.status().message());
    ClientRegistry::FinishMigration(slot_, outcome);
    return MigrateReply{"", "", outcome.message};
  }
  outcome.state = MigrationState::kMoved;
  outcome.new_client_id = moved->new_client_id;
  outcome.bytes = moved->bytes;
  outcome.message = "client " + std::to_string(id_) + " moved to " + order->endpoint +
                    " (client " + std::to_string(moved->new_client_id) + " there)";
  moved_to_ = order->endpoint + " as client " + std::to_string(moved->new_client_id) + " there, " +
              std::to_string(moved->bytes >> 20) + " MiB of device memory in " +
              std::to_string(outcome.pause_us / 1000) + " ms";
  ClientRegistry::FinishMigration(slot_, outcome);
  // A client on this host (over shared memory or the Unix socket) that understands a list
  // (version 9) is told the new server's Unix socket first, then the address it was given.
  std::string endpoint = order->endpoint;
  const std::string_view kind = channel_->Kind();
  if (!moved->local_path.empty() && client_version_ >= 9 && (kind == "shm" || kind == "unix")) {
    endpoint = "unix:" + moved->local_path + "," + order->endpoint;
  }
  return MigrateReply{endpoint, moved->token, ""};
}

// ---- taking a client in ----------------------------------------------------------------------

CudaResult<MallocAtReply> ClientConnection::Handle(const MallocAtRequest& r, Io& io) {
  if (!importing_) {
    io.protocol = InvalidArgument("MallocAt outside an import link");
    return Error(CudaError::kUnknown, "protocol error");
  }
  if (r.bytes == 0 || r.ptr == 0) return Error(CudaError::kInvalidValue, "an empty allocation");
  if (!memory_.TryReserve(r.bytes)) {
    return Error(CudaError::kMemoryAllocation,
                 "the server's memory limit of " + std::to_string(memory_.limit_bytes() >> 20) +
                     " MiB is reached (" + std::to_string(memory_.used_bytes() >> 20) +
                     " MiB in use)");
  }
  CudaResult<DevicePtr> ptr = session_->MallocAt(r.ptr, r.bytes);
  if (!ptr.ok() || *ptr != r.ptr || !allocations_.Add(r.ptr, r.bytes)) {
    if (ptr.ok()) (void)session_->Free(*ptr);
    memory_.Release(r.bytes);
    return ptr.ok() ? Error(CudaError::kInvalidValue, "the device placed it elsewhere")
                    : ptr.status();
  }
  counters_->allocations += 1;
  counters_->allocated_bytes += r.bytes;
  return MallocAtReply{};
}

CudaResult<PoolBlockAtReply> ClientConnection::Handle(const PoolBlockAtRequest& r, Io& io) {
  if (!importing_) {
    io.protocol = InvalidArgument("PoolBlockAt outside an import link");
    return Error(CudaError::kUnknown, "protocol error");
  }
  std::optional<AddressRanges<uint8_t>::Range> range = allocations_.Find(r.ptr);
  if (!range || range->base != r.ptr || range->value != kPlainAllocation ||
      pool_allocations_.contains(r.ptr)) {
    return Error(CudaError::kInvalidValue, Hex(r.ptr) + " is not an allocation placed here");
  }
  FLYT_CUDA_ASSIGN_OR_RETURN(Pool * pool, FindPool(r.pool));
  pool_allocations_[r.ptr] = LiveBlock{r.pool, range->size};
  pool->reserved += range->size;
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  pool->used += range->size;
  pool->used_high = std::max(pool->used_high, pool->used);
  return PoolBlockAtReply{};
}

CudaResult<ModuleGetGlobalAtReply> ClientConnection::Handle(const ModuleGetGlobalAtRequest& r,
                                                            Io& io) {
  if (!importing_) {
    io.protocol = InvalidArgument("ModuleGetGlobalAt outside an import link");
    return Error(CudaError::kUnknown, "protocol error");
  }
  const Module* module = modules_.Find(r.module);
  if (!module) {
    return Error(CudaError::kInvalidResourceHandle, "no module " + std::to_string(r.module));
  }
  auto key = std::make_pair(r.module, r.name);
  if (global_cache_.contains(key)) return Error(CudaError::kInvalidValue, "global placed twice");
  FLYT_CUDA_ASSIGN_OR_RETURN(GlobalSymbol global,
                             session_->ModuleGetGlobalAt(module->handle, r.name,
                                                         r.registered_bytes, r.ptr));
  if (global.ptr != r.ptr || global.bytes != r.registered_bytes) {
    return Error(CudaError::kInvalidValue, "global " + r.name + " would not keep its address");
  }
  if (global.bytes != 0 && !globals_.Add(global.ptr, global.bytes, Global{r.module})) {
    return Error(CudaError::kUnknown, "backend returned a global that overlaps another range");
  }
  global_cache_.emplace(key, global);
  return ModuleGetGlobalAtReply{};
}

void ClientConnection::NoteImported(uint64_t bytes) {
  if (!importing_) return;
  import_bytes_ += bytes;
  if (server_.options_.test_exit_after_import_bytes != 0 &&
      import_bytes_ >= server_.options_.test_exit_after_import_bytes) {
    spdlog::warn("{}: test fault: the process exits in the middle of taking a client in", Tag());
    if (std::shared_ptr<spdlog::logger> logger = spdlog::default_logger()) logger->flush();
    ::_exit(1);
  }
}

CudaResult<ImportFinishReply> ClientConnection::Handle(const ImportFinishRequest&, Io& io) {
  if (!importing_) {
    io.protocol = InvalidArgument("ImportFinish outside an import link");
    return Error(CudaError::kUnknown, "protocol error");
  }
  FLYT_CUDA_RETURN_IF_ERROR(session_->DeviceSynchronize());
  if (async_error_) {
    return Error(static_cast<CudaError>(async_error_->async_code), async_error_->async_message);
  }
  std::string random = RandomHex(16);
  if (random.size() != 32) return Error(CudaError::kUnknown, "no randomness for a token");
  import_token_ = std::to_string(id_) + "-" + random;
  await_claim_ = true;
  return ImportFinishReply{import_token_};
}

Status ClientConnection::AwaitClaim() {
  await_claim_ = false;
  spdlog::info("{}: holds a moved client's state ({} MiB); waiting for the client", Tag(),
               import_bytes_ >> 20);
  const Clock::time_point deadline = Clock::now() + server_.options_.claim_timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return Unavailable("the moved client did not arrive within " +
                         std::to_string(server_.options_.claim_timeout.count() / 1000) + " s");
    }
    pollfd p{handoff_.get(), POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) return ErrnoError("poll the hand-over pair", errno);
    if (n <= 0) continue;
    std::vector<UniqueFd> fds;
    std::byte raw[kFrameHeaderBytes];
    FLYT_RETURN_IF_ERROR(ReadWithFds(handoff_.get(), raw, &fds, 1));
    FLYT_ASSIGN_OR_RETURN(FrameHeader header, DecodeFrameHeader(raw));
    Bytes payload(header.payload_bytes);
    FLYT_RETURN_IF_ERROR(ReadWithFds(handoff_.get(), payload, &fds, 1));
    HelloRequest hello;
    if (fds.size() != 1 || header.kind != FrameKind::kHello || !DecodeExactly(payload, hello)) {
      return InvalidArgument("a malformed hand-over");
    }
    if (!SecretMatches(import_token_, hello.resume)) {
      spdlog::warn("{}: refused a hello with a wrong resume token", Tag());
      Bytes refusal = RefusalFrame(header.seq, server_.options_.label,
                                   std::string(kAuthRefusedPrefix) + ": wrong resume token");
      (void)!::send(fds[0].get(), refusal.data(), refusal.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      continue;
    }
    return Claim(std::move(fds[0]), header.seq, hello);
  }
}

Status ClientConnection::Claim(UniqueFd fd, uint32_t seq, const HelloRequest& hello) {
  HelloReply reply = BaseHelloReply();
  reply.version = std::min(hello.max_version, kProtocolVersion);
  reply.capabilities = hello.capabilities & kAllCapabilities & ~uint64_t{kCapSharedMemory};
  // The link is done with; the client's socket is this connection's from now on.
  channel_->Shutdown();
  ::shutdown(fd_, SHUT_RDWR);
  claimed_fd_ = std::move(fd);
  fd_ = claimed_fd_.get();
  channel_ = std::make_unique<SocketChannel>(fd_);
  // A client on this host that asks for shared memory gets rings here too, made by this
  // process, not the supervisor (the supervisor holds the import link's socket, not the client's:
  // no fresh process can take a claimed connection over after a failed reset). No arena: the
  // program's pinned memory stays in the first server's.
  if (server_.options_.shared_memory && (hello.capabilities & kCapSharedMemory) != 0 &&
      reply.version >= 9) {
    ShmLayout rings_only{server_.options_.shm_layout.ring_bytes, 0};
    shm_offer_ = MakeShmOffer(fd_, rings_only, id_);
    if (shm_offer_ != nullptr) reply.capabilities |= kCapSharedMemory;
  }
  hello_.seq = seq;  // the ShmAck answers this hello
  importing_ = false;
  client_version_ = reply.version;
  client_caps_ = reply.capabilities;
  label_ = hello.client_label.substr(0, 200);
  pid_ = hello.pid;
  ClientRegistry::SetLabel(slot_, label_);
  ClientRegistry::SetClientPid(slot_, pid_);
  ClientRegistry::SetTransport(slot_,
                               channel_->Kind() == "unix" ? TransportKind::kUnix : TransportKind::kTcp,
                               0, 0, 0);
  handoff_.Reset();  // no other hello gets through to this connection
  Bytes out;
  AppendFrame(out, FrameKind::kHelloReply, CallId::kNone, seq, reply);
  FLYT_RETURN_IF_ERROR(SendHelloReply(out, (reply.capabilities & kCapSharedMemory) != 0));
  spdlog::info("{}: took over {} (pid {}), moved here from another server", Tag(), label_, pid_);
  return Status::Ok();
}

}  // namespace flyt::remote
