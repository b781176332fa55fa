#include "remote_server/client_registry.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

namespace flyt::remote {

namespace {

enum SlotState : uint32_t { kFree = 0, kLive = 1, kDeparted = 2 };

// The label as relaxed atomic words: a reader may copy it while a new owner writes it (the
// generation check then discards the copy), which plain chars would make a data race.
constexpr size_t kLabelWords = 26;
constexpr size_t kLabelBytes = kLabelWords * sizeof(uint64_t);

// A string in relaxed atomic words (published by a release store of something else).
template <size_t kWords>
void StoreWords(std::atomic<uint64_t> (&words)[kWords], std::string_view text) {
  size_t n = std::min(text.size(), kWords * sizeof(uint64_t));
  for (size_t w = 0; w < kWords; ++w) {
    uint64_t word = 0;
    size_t at = w * sizeof word;
    if (at < n) std::memcpy(&word, text.data() + at, std::min(sizeof word, n - at));
    words[w].store(word, std::memory_order_relaxed);
  }
}
template <size_t kWords>
std::string LoadWords(const std::atomic<uint64_t> (&words)[kWords], size_t n) {
  char text[kWords * sizeof(uint64_t)];
  for (size_t w = 0; w < kWords; ++w) {
    uint64_t word = words[w].load(std::memory_order_relaxed);
    std::memcpy(text + w * sizeof word, &word, sizeof word);
  }
  return std::string(text, std::min(n, sizeof text));
}

constexpr size_t kEndpointWords = 32;   // 256 bytes
constexpr size_t kSecretWords = 128;    // 1024 bytes (kMaxSecretBytes)
constexpr size_t kMessageWords = 64;    // 512 bytes

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);

}  // namespace

struct ClientSlot {
  std::atomic<uint32_t> state{kFree};
  // Bumped when the slot is acquired and when it departs; readers compare it before and after.
  std::atomic<uint64_t> generation{0};
  std::atomic<uint64_t> id{0};
  std::atomic<uint64_t> departed_order{0};
  std::atomic<uint32_t> label_bytes{0};  // 0 until the label is published
  std::atomic<uint32_t> client_pid{0};
  std::atomic<uint32_t> respawn{0};  // 1: a fresh process is to answer the reset of respawn_seq
  std::atomic<uint32_t> respawn_seq{0};
  std::atomic<uint32_t> transport{0};  // TransportKind
  std::atomic<uint32_t> peer_pid{0};
  std::atomic<uint32_t> peer_uid{0};
  std::atomic<uint64_t> arena_bytes{0};
  std::atomic<uint64_t> label[kLabelWords];
  ClientCounters counters;
  std::atomic<uint64_t> reserved_bytes{0};
  // Live migration: an order and then its outcome (MigrationState; the fields below are written
  // before a release store of `migration` and read after an acquire load of it).
  std::atomic<uint32_t> migration{0};
  std::atomic<uint32_t> endpoint_bytes{0};
  std::atomic<uint32_t> secret_bytes{0};
  std::atomic<uint32_t> message_bytes{0};
  std::atomic<uint64_t> endpoint[kEndpointWords];
  std::atomic<uint64_t> secret[kSecretWords];
  std::atomic<uint64_t> message[kMessageWords];
  std::atomic<uint64_t> new_client_id{0};
  std::atomic<uint64_t> moved_bytes{0};
  std::atomic<uint64_t> pause_us{0};
  // The SM share (SmShareState): `share` packs generation << 32 | granted SMs and is stored last
  // (release), the rest before it.
  std::atomic<uint64_t> share{0};
  std::atomic<uint32_t> share_refused{0};
  std::atomic<uint64_t> share_pause_us{0};
  std::atomic<uint32_t> share_message_bytes{0};
  std::atomic<uint64_t> share_message[kMessageWords];
};

struct ClientRegistry::Header {
  std::atomic<uint64_t> used_bytes{0};
  std::atomic<uint64_t> limit_bytes{0};  // 0: no limit
  std::atomic<uint64_t> sm_share{0};     // generation << 32 | sm_count (SmShareOrder)
  std::atomic<uint64_t> departures{0};
  std::atomic<uint64_t> counters[static_cast<size_t>(ServerCounter::kCount)] = {};
};

std::string_view ServerCounterName(ServerCounter counter) {
  switch (counter) {
    case ServerCounter::kAccepted: return "accepted";
    case ServerCounter::kHelloTimeout: return "hello_timeout";
    case ServerCounter::kHelloMalformed: return "hello_malformed";
    case ServerCounter::kEvictedPending: return "evicted_max_pending";
    case ServerCounter::kEvictedPeer: return "evicted_max_pending_per_peer";
    case ServerCounter::kRefusedBusy: return "refused_max_clients";
    case ServerCounter::kRefusedVersion: return "refused_version";
    case ServerCounter::kRefusedAuth: return "refused_auth";
    case ServerCounter::kIdleClosed: return "closed_idle";
    case ServerCounter::kPending: return "pending_hellos";
    case ServerCounter::kCount: break;
  }
  return "unknown";
}

void ClientRegistry::Count(ServerCounter counter, uint64_t n) {
  header_->counters[static_cast<size_t>(counter)].fetch_add(n, std::memory_order_relaxed);
}

void ClientRegistry::SetGauge(ServerCounter counter, uint64_t value) {
  header_->counters[static_cast<size_t>(counter)].store(value, std::memory_order_relaxed);
}

uint64_t ClientRegistry::Counter(ServerCounter counter) const {
  return header_->counters[static_cast<size_t>(counter)].load(std::memory_order_relaxed);
}

std::vector<NamedValue> ClientRegistry::CounterValues() const {
  std::vector<NamedValue> out;
  for (uint32_t i = 0; i < static_cast<uint32_t>(ServerCounter::kCount); ++i) {
    auto counter = static_cast<ServerCounter>(i);
    out.push_back({std::string(ServerCounterName(counter)),
                   static_cast<int64_t>(Counter(counter))});
  }
  return out;
}

Result<std::unique_ptr<ClientRegistry>> ClientRegistry::Create(size_t live_capacity,
                                                               size_t departed_kept,
                                                               uint64_t memory_limit_bytes) {
  size_t slot_count = live_capacity + departed_kept;
  if (slot_count == 0) return InvalidArgument("a client table needs at least one slot");
  size_t bytes = sizeof(Header) + slot_count * sizeof(ClientSlot);
  void* mapping =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return ErrnoError("map the shared client table", errno);
  return std::unique_ptr<ClientRegistry>(
      new ClientRegistry(mapping, bytes, slot_count, departed_kept, memory_limit_bytes));
}

ClientRegistry::ClientRegistry(void* mapping, size_t mapping_bytes, size_t slot_count,
                               size_t departed_kept, uint64_t limit_bytes)
    : mapping_(mapping),
      mapping_bytes_(mapping_bytes),
      header_(new (mapping) Header()),
      slots_(reinterpret_cast<ClientSlot*>(static_cast<std::byte*>(mapping) + sizeof(Header))),
      slot_count_(slot_count),
      departed_kept_(departed_kept) {
  header_->limit_bytes.store(limit_bytes);
  for (size_t i = 0; i < slot_count_; ++i) new (&slots_[i]) ClientSlot();
}

ClientRegistry::~ClientRegistry() {
  // The slots and header hold only atomics (trivially destructible); unmapping ends them.
  ::munmap(mapping_, mapping_bytes_);
}

ClientSlot* ClientRegistry::Acquire(uint64_t id) {
  ClientSlot* chosen = nullptr;
  size_t departed = 0;
  ClientSlot* oldest_departed = nullptr;
  for (size_t i = 0; i < slot_count_; ++i) {
    ClientSlot& slot = slots_[i];
    uint32_t state = slot.state.load();
    if (state == kFree && chosen == nullptr) chosen = &slot;
    if (state == kDeparted) {
      ++departed;
      if (oldest_departed == nullptr ||
          slot.departed_order.load() < oldest_departed->departed_order.load()) {
        oldest_departed = &slot;
      }
    }
  }
  // Keep the newest `departed_kept_` departed clients: take a free slot while the departed ones
  // fit in their share, else recycle the oldest departed one.
  if (oldest_departed != nullptr && (chosen == nullptr || departed >= departed_kept_)) {
    chosen = oldest_departed;
  }
  if (chosen == nullptr) return nullptr;
  ClientSlot& slot = *chosen;
  slot.generation.fetch_add(1);
  slot.label_bytes.store(0);
  slot.id.store(id);
  slot.client_pid.store(0);
  slot.respawn.store(0);
  slot.transport.store(0);
  slot.peer_pid.store(0);
  slot.peer_uid.store(0);
  slot.arena_bytes.store(0);
  slot.migration.store(0);
  slot.share.store(0);
  slot.share_refused.store(0);
  slot.share_pause_us.store(0);
  slot.share_message_bytes.store(0);
  slot.departed_order.store(0);
  ClientCounters& c = slot.counters;
  for (std::atomic<uint64_t>* counter :
       {&c.allocations, &c.allocated_bytes, &c.streams, &c.events, &c.modules, &c.launches,
        &c.bytes_to_device, &c.bytes_from_device, &c.arena_copy_bytes, &slot.reserved_bytes}) {
    counter->store(0);
  }
  slot.state.store(kLive);
  return &slot;
}

uint64_t ClientRegistry::Depart(ClientSlot* slot) {
  uint64_t held = slot->reserved_bytes.exchange(0);
  if (held != 0) header_->used_bytes.fetch_sub(held);
  slot->departed_order.store(header_->departures.fetch_add(1) + 1);
  slot->generation.fetch_add(1);
  slot->state.store(kDeparted);
  return held;
}

ClientCounters& ClientRegistry::Counters(ClientSlot* slot) { return slot->counters; }

void ClientRegistry::SetLabel(ClientSlot* slot, const std::string& label) {
  StoreWords(slot->label, label);
  slot->label_bytes.store(static_cast<uint32_t>(std::min(label.size(), kLabelBytes)),
                          std::memory_order_release);
}

std::string ClientRegistry::Label(const ClientSlot* slot) {
  uint32_t n = slot->label_bytes.load(std::memory_order_acquire);
  return LoadWords(slot->label, n);
}

ClientSlot* ClientRegistry::FindLive(uint64_t id) {
  for (size_t i = 0; i < slot_count_; ++i) {
    if (slots_[i].state.load() == kLive && slots_[i].id.load() == id) return &slots_[i];
  }
  return nullptr;
}

bool ClientRegistry::PostMigration(ClientSlot* slot, const MigrationOrder& order) {
  uint32_t state = slot->migration.load(std::memory_order_acquire);
  while (true) {
    auto s = static_cast<MigrationState>(state);
    if (s == MigrationState::kPosting || s == MigrationState::kRequested ||
        s == MigrationState::kRunning) {
      return false;
    }
    if (slot->migration.compare_exchange_weak(state,
                                              static_cast<uint32_t>(MigrationState::kPosting))) {
      break;
    }
  }
  StoreWords(slot->endpoint, order.endpoint);
  slot->endpoint_bytes.store(static_cast<uint32_t>(order.endpoint.size()));
  StoreWords(slot->secret, order.secret);
  slot->secret_bytes.store(static_cast<uint32_t>(order.secret.size()));
  slot->message_bytes.store(0);
  slot->new_client_id.store(0);
  slot->moved_bytes.store(0);
  slot->pause_us.store(0);
  slot->migration.store(static_cast<uint32_t>(MigrationState::kRequested),
                        std::memory_order_release);
  return true;
}

bool ClientRegistry::MigrationRequested(const ClientSlot* slot) {
  return slot->migration.load(std::memory_order_relaxed) ==
         static_cast<uint32_t>(MigrationState::kRequested);
}

std::optional<MigrationOrder> ClientRegistry::TakeMigration(ClientSlot* slot) {
  uint32_t expected = static_cast<uint32_t>(MigrationState::kRequested);
  if (!slot->migration.compare_exchange_strong(expected,
                                               static_cast<uint32_t>(MigrationState::kRunning),
                                               std::memory_order_acq_rel)) {
    return std::nullopt;
  }
  MigrationOrder order;
  order.endpoint = LoadWords(slot->endpoint, slot->endpoint_bytes.load());
  order.secret = LoadWords(slot->secret, slot->secret_bytes.load());
  StoreWords(slot->secret, "");  // read once, by the process that moves the client
  return order;
}

void ClientRegistry::FinishMigration(ClientSlot* slot, const MigrationOutcome& outcome) {
  StoreWords(slot->message, outcome.message);
  slot->message_bytes.store(static_cast<uint32_t>(std::min<size_t>(outcome.message.size(),
                                                                    kMessageWords * 8)));
  slot->new_client_id.store(outcome.new_client_id);
  slot->moved_bytes.store(outcome.bytes);
  slot->pause_us.store(outcome.pause_us);
  slot->migration.store(static_cast<uint32_t>(outcome.state), std::memory_order_release);
}

MigrationOutcome ClientRegistry::Migration(const ClientSlot* slot) {
  MigrationOutcome out;
  out.state = static_cast<MigrationState>(slot->migration.load(std::memory_order_acquire));
  if (out.state == MigrationState::kMoved || out.state == MigrationState::kFailed) {
    out.message = LoadWords(slot->message, slot->message_bytes.load());
    out.new_client_id = slot->new_client_id.load();
    out.bytes = slot->moved_bytes.load();
    out.pause_us = slot->pause_us.load();
  }
  return out;
}

bool ClientRegistry::WithdrawMigration(ClientSlot* slot) {
  uint32_t expected = static_cast<uint32_t>(MigrationState::kRequested);
  if (slot->migration.compare_exchange_strong(expected,
                                              static_cast<uint32_t>(MigrationState::kWithdrawn))) {
    StoreWords(slot->secret, "");
    return true;
  }
  return false;
}

void ClientRegistry::SetClientPid(ClientSlot* slot, uint32_t pid) { slot->client_pid.store(pid); }

uint32_t ClientRegistry::ClientPid(const ClientSlot* slot) { return slot->client_pid.load(); }

void ClientRegistry::RequestRespawn(ClientSlot* slot, uint32_t reset_seq) {
  slot->respawn_seq.store(reset_seq);
  slot->respawn.store(1);
}

bool ClientRegistry::RespawnRequested(const ClientSlot* slot) { return slot->respawn.load() != 0; }

std::optional<uint32_t> ClientRegistry::TakeRespawn(ClientSlot* slot) {
  if (slot->respawn.exchange(0) == 0) return std::nullopt;
  return slot->respawn_seq.load();
}

namespace {
bool Exceeds(uint64_t limit, uint64_t used, uint64_t bytes) {
  return limit != 0 && (bytes > limit || used > limit - bytes);
}
}  // namespace

bool ClientRegistry::TryReserve(ClientSlot* slot, uint64_t bytes) {
  std::atomic<uint64_t>& used = header_->used_bytes;
  uint64_t now = used.load();
  while (true) {
    if (Exceeds(header_->limit_bytes.load(), now, bytes)) return false;
    if (used.compare_exchange_weak(now, now + bytes)) break;
  }
  // A limit lowered meanwhile (SetLimitBytes) either saw these bytes or is seen here.
  if (Exceeds(header_->limit_bytes.load(), now, bytes)) {
    used.fetch_sub(bytes);
    return false;
  }
  slot->reserved_bytes.fetch_add(bytes);
  return true;
}

uint64_t ClientRegistry::limit_bytes() const { return header_->limit_bytes.load(); }

std::optional<uint64_t> ClientRegistry::SetLimitBytes(uint64_t limit) {
  const uint64_t before = header_->limit_bytes.exchange(limit);
  const uint64_t used = header_->used_bytes.load();
  if (limit != 0 && used > limit) {
    header_->limit_bytes.store(before);
    return used;
  }
  return std::nullopt;
}

uint32_t ClientRegistry::PostSmShare(uint32_t sm_count) {
  uint64_t now = header_->sm_share.load();
  while (true) {
    const uint32_t generation = static_cast<uint32_t>(now >> 32) + 1;
    if (header_->sm_share.compare_exchange_weak(now, (uint64_t{generation} << 32) | sm_count)) {
      return generation;
    }
  }
}

SmShareOrder ClientRegistry::CurrentSmShare() const {
  const uint64_t now = header_->sm_share.load(std::memory_order_acquire);
  return {static_cast<uint32_t>(now >> 32), static_cast<uint32_t>(now)};
}

void ClientRegistry::NoteSmShare(ClientSlot* slot, const SmShareState& state) {
  StoreWords(slot->share_message, state.message);
  slot->share_message_bytes.store(
      static_cast<uint32_t>(std::min<size_t>(state.message.size(), kMessageWords * 8)));
  slot->share_refused.store(state.refused ? 1 : 0);
  slot->share_pause_us.store(state.pause_us);
  slot->share.store((uint64_t{state.generation} << 32) | state.sm_count_granted,
                    std::memory_order_release);
}

SmShareState ClientRegistry::SmShareOf(const ClientSlot* slot) {
  SmShareState out;
  const uint64_t share = slot->share.load(std::memory_order_acquire);
  out.generation = static_cast<uint32_t>(share >> 32);
  out.sm_count_granted = static_cast<uint32_t>(share);
  out.refused = slot->share_refused.load() != 0;
  out.pause_us = slot->share_pause_us.load();
  out.message = LoadWords(slot->share_message, slot->share_message_bytes.load());
  return out;
}

std::vector<uint64_t> ClientRegistry::LiveIds() const {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < slot_count_; ++i) {
    if (slots_[i].state.load() == kLive) out.push_back(slots_[i].id.load());
  }
  return out;
}

std::vector<ClientShare> ClientRegistry::Shares() const {
  std::vector<ClientShare> out;
  for (size_t i = 0; i < slot_count_; ++i) {
    const ClientSlot& slot = slots_[i];
    uint64_t generation = slot.generation.load(std::memory_order_acquire);
    if (slot.state.load(std::memory_order_acquire) != kLive) continue;
    const uint64_t share = slot.share.load(std::memory_order_acquire);
    ClientShare s{slot.id.load(), static_cast<uint32_t>(share),
                  static_cast<uint32_t>(share >> 32)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.generation.load(std::memory_order_relaxed) != generation) continue;  // reused
    out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const ClientShare& a, const ClientShare& b) { return a.client_id < b.client_id; });
  return out;
}

void ClientRegistry::Release(ClientSlot* slot, uint64_t bytes) {
  slot->reserved_bytes.fetch_sub(bytes);
  header_->used_bytes.fetch_sub(bytes);
}

uint64_t ClientRegistry::used_bytes() const { return header_->used_bytes.load(); }

size_t ClientRegistry::LiveCount() const {
  size_t n = 0;
  for (size_t i = 0; i < slot_count_; ++i) n += slots_[i].state.load() == kLive ? 1 : 0;
  return n;
}

std::string_view TransportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kUnix: return "unix";
    case TransportKind::kShm: return "shm";
    case TransportKind::kUnknown: break;
  }
  return "unknown";
}

void ClientRegistry::SetTransport(ClientSlot* slot, TransportKind kind, uint32_t peer_pid,
                                  uint32_t peer_uid, uint64_t arena_bytes) {
  slot->peer_pid.store(peer_pid);
  slot->peer_uid.store(peer_uid);
  slot->arena_bytes.store(arena_bytes);
  slot->transport.store(static_cast<uint32_t>(kind));
}

TransportKind ClientRegistry::Transport(const ClientSlot* slot) {
  return static_cast<TransportKind>(slot->transport.load());
}

std::vector<ClientTransport> ClientRegistry::Transports() const {
  std::vector<ClientTransport> out;
  for (size_t i = 0; i < slot_count_; ++i) {
    const ClientSlot& slot = slots_[i];
    uint64_t generation = slot.generation.load(std::memory_order_acquire);
    if (slot.state.load(std::memory_order_acquire) == kFree) continue;
    ClientTransport t;
    t.client_id = slot.id.load();
    t.transport = TransportName(static_cast<TransportKind>(slot.transport.load()));
    t.peer_pid = slot.peer_pid.load();
    t.peer_uid = slot.peer_uid.load();
    t.arena_bytes = slot.arena_bytes.load();
    t.arena_copy_bytes = slot.counters.arena_copy_bytes.load();
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.generation.load(std::memory_order_relaxed) != generation) continue;  // reused
    out.push_back(std::move(t));
  }
  std::sort(out.begin(), out.end(), [](const ClientTransport& a, const ClientTransport& b) {
    return a.client_id < b.client_id;
  });
  return out;
}

DebugStatsReply ClientRegistry::Snapshot() const {
  struct Row {
    uint64_t order;  // departed: departure order; connected: max, then by id
    ClientStats stats;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < slot_count_; ++i) {
    const ClientSlot& slot = slots_[i];
    for (int attempt = 0; attempt < 3; ++attempt) {
      uint64_t generation = slot.generation.load(std::memory_order_acquire);
      uint32_t state = slot.state.load(std::memory_order_acquire);
      if (state == kFree) break;
      Row row;
      row.order = state == kDeparted ? slot.departed_order.load() : UINT64_MAX;
      ClientStats& s = row.stats;
      s.client_id = slot.id.load();
      s.connected = state == kLive;
      s.label = Label(&slot);
      const ClientCounters& c = slot.counters;
      s.allocations = c.allocations;
      s.allocated_bytes = c.allocated_bytes;
      s.streams = c.streams;
      s.events = c.events;
      s.modules = c.modules;
      s.launches = c.launches;
      s.bytes_to_device = c.bytes_to_device;
      s.bytes_from_device = c.bytes_from_device;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slot.generation.load(std::memory_order_relaxed) != generation) continue;  // reused
      rows.push_back(std::move(row));
      break;
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.order != b.order) return a.order < b.order;
    return a.stats.client_id < b.stats.client_id;
  });
  DebugStatsReply reply;
  for (Row& row : rows) reply.clients.push_back(std::move(row.stats));
  reply.allocated_bytes = used_bytes();
  reply.memory_limit_bytes = limit_bytes();
  return reply;
}

}  // namespace flyt::remote
