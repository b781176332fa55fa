// flyt-gpu-server's core under peers that try to hold its slots: connections that never say
// hello, hellos dripped a byte at a time, clients that say hello and then idle, more clients
// than --max-clients. Each case runs against a real server on loopback TCP with the sim
// backend, with clients served by threads and by forked processes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/fatbin.h"
#include "remote_client/client.h"
#include "remote_client/debug_stats.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

namespace flyt::remote {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A TCP connection to the server from `source` (any 127.0.0.0/8 address: another "host").
UniqueFd RawConnect(uint16_t port, const char* source = "127.0.0.1") {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) return UniqueFd();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) return UniqueFd();
  return fd;
}

Bytes HelloBytes(const std::string& label) {
  Bytes out;
  AppendFrame(out, FrameKind::kHello, CallId::kNone, 0,
              HelloRequest{kHelloMagic, kMinProtocolVersion, kProtocolVersion, kAllCapabilities,
                           label, static_cast<uint32_t>(::getpid()), 0});
  return out;
}

// True once the server has closed `fd` (end of stream or a reset); false if it is still open.
bool ClosedByServer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  char buf[256];
  ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

class ServerAbuseTest : public ::testing::TestWithParam<Isolation> {
 protected:
  static void SetUpTestSuite() {
    // Hundreds of sockets at both ends in this one process.
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 8192);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }

  void TearDown() override {
    if (server_) server_->Stop();
  }

  void StartServer(ServerOptions options) {
    options.listen.push_back(*ParseEndpoint("127.0.0.1:0"));
    if (GetParam() == Isolation::kThread) {
      backend_ = MakeSimBackend();
      server_ = std::make_unique<Server>(*backend_, options);
    } else {
      server_ = std::make_unique<Server>(
          []() -> Result<std::unique_ptr<Backend>> { return MakeSimBackend(); }, options);
    }
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  uint16_t port() const { return server_->endpoints()[0].port; }

  Result<std::unique_ptr<Connection>> TryOpen(const std::string& label = "abuse_test") {
    ClientOptions options;
    options.label = label;
    options.pid = static_cast<uint32_t>(::getpid());
    return Connection::Open(server_->endpoints()[0], options);
  }
  std::unique_ptr<Connection> Open(const std::string& label = "abuse_test") {
    auto conn = TryOpen(label);
    EXPECT_TRUE(conn.ok()) << conn.status().ToString();
    return conn.ok() ? std::move(conn).value() : nullptr;
  }

  size_t Connected() const {
    size_t n = 0;
    for (const ClientStats& c : server_->Stats().clients) n += c.connected ? 1 : 0;
    return n;
  }

  template <typename Pred>
  bool WaitFor(Pred pred, milliseconds limit = milliseconds(10'000)) {
    Clock::time_point end = Clock::now() + limit;
    while (Clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return pred();
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Server> server_;
};

// (a) A hello dripped one byte per 200 ms is closed when the whole hello's deadline passes, and
// it never got a client slot, a thread or a process.
TEST_P(ServerAbuseTest, ADrippedHelloIsClosedAtTheWholeHellosDeadlineUnserved) {
  ServerOptions options;
  options.hello_timeout = milliseconds(1000);
  StartServer(options);
  UniqueFd fd = RawConnect(port());
  ASSERT_TRUE(fd.valid());
  Bytes hello = HelloBytes("dripping");
  Clock::time_point start = Clock::now();
  bool closed = false;
  size_t sent = 0;
  while (sent < hello.size() && Clock::now() - start < milliseconds(6000)) {
    if (ClosedByServer(fd.get())) {
      closed = true;
      break;
    }
    if (::send(fd.get(), &hello[sent], 1, MSG_NOSIGNAL) != 1) {
      closed = true;
      break;
    }
    ++sent;
    // Still in its hello: no slot, so no thread or process serves it.
    if (Connected() != 0 || server_->client_count() != 0) {
      ADD_FAILURE() << "a client slot was taken after " << sent << " bytes of the hello";
      break;
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  milliseconds took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  ASSERT_TRUE(closed) << "still open after " << took.count() << " ms and " << sent << " of "
                      << hello.size() << " bytes";
  EXPECT_LT(sent, hello.size());
  // The deadline is 1 s for the whole hello; the bytes kept coming every 200 ms.
  EXPECT_LT(took.count(), 2500);
  EXPECT_GE(took.count(), 900);
  EXPECT_EQ(server_->Counter(ServerCounter::kHelloTimeout), 1u);
  EXPECT_TRUE(server_->Stats().clients.empty()) << "a client slot was taken for it";
  // An honest client is served as before.
  auto conn = Open();
  ASSERT_TRUE(conn);
  EXPECT_TRUE(conn->MemGetInfo({}).ok());
}

// (b) Hundreds of silent and dripping connections and a hundred clients that said hello and
// idle: a legitimate client still connects and gets its work done right.
TEST_P(ServerAbuseTest, ALegitimateClientIsServedAmidHundredsOfIdleAndDrippingPeers) {
  ServerOptions options;
  options.max_clients = 110;
  options.hello_timeout = milliseconds(30'000);  // the floods stay for the whole test
  options.max_pending = 64;
  options.max_pending_per_peer = 8;
  StartServer(options);

  // 300 silent connections from ten "hosts", 30 from each.
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 300; ++i) {
    std::string source = "127.0.0." + std::to_string(2 + i % 10);
    silent.push_back(RawConnect(port(), source.c_str()));
    ASSERT_TRUE(silent.back().valid()) << i;
  }
  // 50 dripping hellos from one more, a byte every 200 ms for the rest of the test.
  std::vector<UniqueFd> dripping;

  for (int i = 0; i < 50; ++i) {
    dripping.push_back(RawConnect(port(), "127.0.0.20"));
    ASSERT_TRUE(dripping.back().valid()) << i;
  }
  std::atomic<bool> stop{false};
  std::jthread dripper([&] {
    Bytes hello = HelloBytes("dripping");
    for (size_t at = 0; at + 1 < hello.size() && !stop.load(); ++at) {  // never complete
      for (UniqueFd& fd : dripping) (void)::send(fd.get(), &hello[at], 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(milliseconds(200));
    }
  });
  // Destroyed before the dripper: it stops, then is joined, however the test ends.
  struct StopFlag {
    std::atomic<bool>* flag;
    ~StopFlag() { *flag = true; }
  } stopper{&stop};
  // 100 clients that say hello and then do nothing.
  std::vector<std::unique_ptr<Connection>> idle;
  for (int i = 0; i < 100; ++i) {
    idle.push_back(Open("idle " + std::to_string(i)));
    ASSERT_TRUE(idle.back()) << i;
  }

  // The legitimate client: allocates, copies both ways, loads a module and launches.
  Clock::time_point start = Clock::now();
  auto conn = Open("legitimate");
  ASSERT_TRUE(conn);
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  const size_t bytes = 1 << 20;
  auto ptr = conn->Malloc({bytes});
  ASSERT_TRUE(ptr.ok()) << ptr.status().ToString();
  std::vector<std::byte> in(bytes), out(bytes);
  std::mt19937 rng(7);
  for (auto& b : in) b = static_cast<std::byte>(rng());
  ASSERT_TRUE(conn->MemcpyHtoD({ptr->ptr, bytes, 0}, in).ok());
  ASSERT_TRUE(conn->MemcpyDtoH({ptr->ptr, bytes, 0}, out).ok());
  EXPECT_EQ(in, out);
  std::ifstream file(std::string(FLYT_SOURCE_DIR) + "/tests/data/cuda/many_params.fatbin",
                     std::ios::binary);
  ASSERT_TRUE(file);
  Bytes image;
  for (char c; file.get(c);) image.push_back(static_cast<std::byte>(c));
  auto fatbin = cuda::ParseFatbin(image);
  ASSERT_TRUE(fatbin.ok());
  auto kernels = cuda::KernelsOf(*fatbin);
  ASSERT_TRUE(kernels.ok() && !kernels->empty());
  ASSERT_TRUE(conn->ModuleLoad({1, image.size(), "many_params"}, image).ok());
  ASSERT_TRUE(conn->ModuleGetFunction({1, 2, kernels->front().name}).ok());
  ASSERT_TRUE(conn->LaunchKernel(
                      {2, {1, 1, 1}, {32, 1, 1}, 0, 0, Bytes(kernels->front().param_bytes)})
                  .ok());
  ASSERT_TRUE(conn->Sync({}).ok());
  EXPECT_FALSE(conn->TakeAsyncError());
  ASSERT_TRUE(conn->Free({ptr->ptr}).ok());
  ASSERT_TRUE(conn->Sync({}).ok());

  // What the floods cost: only the served clients hold slots; the pending ones are bounded.
  EXPECT_EQ(Connected(), 101u);
  EXPECT_LE(server_->Counter(ServerCounter::kPending), options.max_pending);
  EXPECT_GT(server_->Counter(ServerCounter::kEvictedPeer) +
                server_->Counter(ServerCounter::kEvictedPending),
            0u);
  stop = true;
}

// (c) A client with no call and nothing held is closed after the idle timeout; one that holds
// an allocation, and one that keeps calling, are not.
TEST_P(ServerAbuseTest, AnIdleClientIsClosedButNotOneThatHoldsMemoryOrKeepsCalling) {
  ServerOptions options;
  options.idle_timeout = milliseconds(1000);
  StartServer(options);
  auto idle = Open("idle");
  auto holder = Open("holder");
  auto busy = Open("busy");
  ASSERT_TRUE(idle && holder && busy);
  auto ptr = holder->Malloc({4096});
  ASSERT_TRUE(ptr.ok());
  uint64_t idle_id = idle->server().client_id;
  auto connected = [&](uint64_t id) {
    for (const ClientStats& c : server_->Stats().clients) {
      if (c.client_id == id) return c.connected;
    }
    return false;
  };
  Clock::time_point start = Clock::now();
  while (Clock::now() - start < milliseconds(2500)) {
    ASSERT_TRUE(busy->MemGetInfo({}).ok());
    std::this_thread::sleep_for(milliseconds(250));
  }
  EXPECT_TRUE(WaitFor([&] { return !connected(idle_id); }, milliseconds(3000)));
  EXPECT_FALSE(idle->MemGetInfo({}).ok()) << "the idle client's connection is closed";
  EXPECT_EQ(server_->Counter(ServerCounter::kIdleClosed), 1u);
  EXPECT_TRUE(connected(holder->server().client_id));
  EXPECT_TRUE(connected(busy->server().client_id));
  std::vector<std::byte> in(4096, std::byte{0x3C}), out(4096);
  ASSERT_TRUE(holder->MemcpyHtoD({ptr->ptr, 4096, 0}, in).ok());
  ASSERT_TRUE(holder->MemcpyDtoH({ptr->ptr, 4096, 0}, out).ok());
  EXPECT_EQ(in, out);
}

// (d) A client over --max-clients is told so at once, in words, not left hanging; when a slot
// frees, it is served.
TEST_P(ServerAbuseTest, AClientOverMaxClientsIsRefusedClearlyAndServedOnceASlotFrees) {
  ServerOptions options;
  options.max_clients = 2;
  StartServer(options);
  auto a = Open("a");
  auto b = Open("b");
  ASSERT_TRUE(a && b);
  Clock::time_point start = Clock::now();
  auto refused = TryOpen("c");
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("server busy"), std::string::npos);
  EXPECT_NE(refused.status().message().find("2 clients"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(server_->Counter(ServerCounter::kRefusedBusy), 1u);
  a.reset();
  EXPECT_TRUE(WaitFor([&] { return Connected() == 1; }));
  auto c = Open("c");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->MemGetInfo({}).ok());
}

// Honest clients connecting all at once from one host (the ranks of a job) are served, though
// more of them are connecting than max_pending_per_peer.
TEST_P(ServerAbuseTest, ABurstOfHonestClientsFromOneHostIsServed) {
  ServerOptions options;  // the default bounds: 64 pending, 16 from one peer
  StartServer(options);
  std::vector<std::optional<Result<std::unique_ptr<Connection>>>> results(48);
  {
    std::vector<std::jthread> threads;
    for (size_t i = 0; i < results.size(); ++i) {
      threads.emplace_back([&, i] { results[i] = TryOpen("rank " + std::to_string(i)); });
    }
  }
  for (size_t i = 0; i < results.size(); ++i) {
    ASSERT_TRUE(results[i] && results[i]->ok()) << i;
    EXPECT_TRUE((**results[i])->MemGetInfo({}).ok());
  }
  EXPECT_EQ(server_->Counter(ServerCounter::kEvictedPeer), 0u);
  EXPECT_EQ(server_->Counter(ServerCounter::kEvictedPending), 0u);
}

// A hello as raw bytes with the given version range and secret (empty: none on the wire).
Bytes HelloBytes(uint16_t max_version, const std::string& secret) {
  Bytes out;
  HelloRequest hello{kHelloMagic, kMinProtocolVersion, max_version, kAllCapabilities, "raw",
                     static_cast<uint32_t>(::getpid()), 0, secret};
  AppendFrame(out, FrameKind::kHello, CallId::kNone, 7, hello);
  return out;
}

// Sends `hello` on a new connection and reads the hello reply (nullopt: none came).
std::optional<HelloReply> RawHello(uint16_t port, const Bytes& hello) {
  UniqueFd fd = RawConnect(port);
  if (!fd.valid() || !WriteAll(fd.get(), hello).ok()) return std::nullopt;
  SocketReader reader(fd.get());
  std::byte raw[kFrameHeaderBytes];
  if (!reader.Read(raw).ok()) return std::nullopt;
  Result<FrameHeader> header = DecodeFrameHeader(raw);
  if (!header.ok() || header->kind != FrameKind::kHelloReply) return std::nullopt;
  Bytes payload(header->payload_bytes);
  if (!reader.Read(payload).ok()) return std::nullopt;
  HelloReply reply;
  if (!DecodeExactly(payload, reply)) return std::nullopt;
  return reply;
}

const std::string kSecret = "s3cr3t-0123456789abcdef0123456789abcdef";

// A server started with a secret serves its holder only: a missing or wrong secret, and a
// version 1 hello (which has none), are refused in the hello reply with words the runtime turns
// into a clear error, counted as refused_auth, with no process or thread started; the server
// stays up and serves the right secret afterwards, however many refusals came first.
TEST_P(ServerAbuseTest, ASecretServerServesOnlyTheHolderOfItsSecret) {
  ServerOptions options;
  options.secret = kSecret;
  StartServer(options);
  auto missing = TryOpen("no secret");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(missing.status().reason(), "unauthenticated");
  EXPECT_NE(missing.status().message().find("wrong or missing secret"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(missing.status().message().find(kSecret), std::string::npos);

  ClientOptions wrong;
  wrong.label = "wrong secret";
  wrong.secret = kSecret.substr(0, kSecret.size() - 1) + "X";
  auto refused = Connection::Open(server_->endpoints()[0], wrong);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "unauthenticated");
  wrong.secret = kSecret + "X";  // a longer one that starts with the secret
  EXPECT_FALSE(Connection::Open(server_->endpoints()[0], wrong).ok());

  std::optional<HelloReply> v1 = RawHello(port(), HelloBytes(1, ""));
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->version, 0);
  EXPECT_TRUE(v1->error.starts_with(kAuthRefusedPrefix)) << v1->error;
  EXPECT_EQ(server_->Counter(ServerCounter::kRefusedAuth), 4u);
  EXPECT_EQ(Connected(), 0u);

  // A burst of wrong guesses changes nothing for the holder.
  for (int i = 0; i < 40; ++i) {
    wrong.secret = "guess-" + std::to_string(i) + std::string(32, 'g');
    EXPECT_FALSE(Connection::Open(server_->endpoints()[0], wrong).ok());
  }
  EXPECT_EQ(server_->Counter(ServerCounter::kRefusedAuth), 44u);
  ClientOptions right;
  right.label = "holder";
  right.secret = kSecret;
  auto conn = Connection::Open(server_->endpoints()[0], right);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_EQ((*conn)->server().version, kProtocolVersion);
  auto ptr = (*conn)->Malloc({4096});
  ASSERT_TRUE(ptr.ok()) << ptr.status().ToString();
  EXPECT_TRUE((*conn)->MemGetInfo({}).ok());
  EXPECT_EQ(Connected(), 1u);
  // The counter is what `flyt-gpu-server stats` shows (which needs the secret too).
  EXPECT_FALSE(FetchStats(server_->endpoints()[0]).ok());
  auto stats = FetchStats(server_->endpoints()[0], kSecret);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  bool named = false;
  for (const NamedValue& v : stats->counters) {
    if (v.name == "refused_auth") named = v.value == 45;
  }
  EXPECT_TRUE(named) << StatsToJson(*stats);
}

// Without a secret the server is as before: a version 1 hello is served at version 1, and a
// hello that carries a secret is served too.
TEST_P(ServerAbuseTest, AServerWithoutASecretServesVersionOneAndSecretCarryingHellos) {
  StartServer(ServerOptions{});
  std::optional<HelloReply> v1 = RawHello(port(), HelloBytes(1, ""));
  ASSERT_TRUE(v1);
  EXPECT_EQ(v1->version, 1) << v1->error;
  EXPECT_TRUE(v1->error.empty());
  ClientOptions with;
  with.label = "has a secret";
  with.secret = kSecret;
  auto conn = Connection::Open(server_->endpoints()[0], with);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_TRUE((*conn)->MemGetInfo({}).ok());
  EXPECT_EQ(server_->Counter(ServerCounter::kRefusedAuth), 0u);
}

// SIGTERM's drain: no new connection is served, a connected client goes on until it leaves, and
// the drain ends as soon as it has; one that stays past the grace is disconnected.
TEST_P(ServerAbuseTest, ADrainLetsConnectedClientsFinishAndAcceptsNoNewOnes) {
  ServerOptions options;
  options.stop_grace = milliseconds(5000);
  StartServer(options);
  auto conn = Open("busy");
  ASSERT_TRUE(conn);
  auto ptr = conn->Malloc({1 << 20});
  ASSERT_TRUE(ptr.ok());
  Clock::time_point start = Clock::now();
  std::thread drain([&] { server_->Drain(milliseconds(5000)); });
  EXPECT_TRUE(WaitFor([&] { return !TryOpen("late").ok(); }, milliseconds(3000)));
  // The connected client still works during the drain.
  std::vector<std::byte> in(1 << 20, std::byte{7}), out(1 << 20);
  EXPECT_TRUE(conn->MemcpyHtoD({ptr->ptr, in.size(), 0}, in).ok());
  EXPECT_TRUE(conn->MemcpyDtoH({ptr->ptr, out.size(), 0}, out).ok());
  EXPECT_EQ(in, out);
  conn.reset();
  drain.join();
  EXPECT_LT(Clock::now() - start, milliseconds(4000));
  EXPECT_EQ(server_->client_count(), 0u);
}

TEST_P(ServerAbuseTest, ADrainDisconnectsAClientThatStaysPastTheGrace) {
  StartServer(ServerOptions{});
  auto conn = Open("stays");
  ASSERT_TRUE(conn);
  Clock::time_point start = Clock::now();
  server_->Drain(milliseconds(300));
  EXPECT_GE(Clock::now() - start, milliseconds(300));
  EXPECT_LT(Clock::now() - start, milliseconds(3000));
  EXPECT_FALSE(conn->MemGetInfo({}).ok());
}

INSTANTIATE_TEST_SUITE_P(Isolation, ServerAbuseTest,
                         ::testing::Values(Isolation::kThread, Isolation::kProcess),
                         [](const ::testing::TestParamInfo<Isolation>& param) {
                           return param.param == Isolation::kThread ? "Thread" : "Process";
                         });

}  // namespace
}  // namespace flyt::remote
