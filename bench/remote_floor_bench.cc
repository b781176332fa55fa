// Remote-call floors (issue 6): what one round trip costs with nothing but the transport, measured
// on the same machine and in the same run as flyt's own remote-call benchmark, so the two can be
// put side by side.
//
//   build/bin/flyt-bench-remote-floor [--iterations N] [--repeats R] [--warmup W]
//       [--sizes 32,64,128] [--bulk-mib 64] [--chunk-kib 256]
//       [--transports unix,tcp] [--cases pingpong,rpc,bulk] [--json]
//
// Floors measured:
//  - pingpong: a raw socket ping-pong. The client writes S bytes, the server reads S and writes S
//    back, the client reads them: the physical limit of one request/reply of that size here.
//  - bulk: the client streams --bulk-mib MiB in --chunk-kib chunks, the server reads them all and
//    answers one byte; MiB/s of the whole exchange.
//  - rpc-null / rpc-arg / rpc-echo: ONC RPC over libtirpc, the transport Cricket uses. Procedure 0
//    (NULL: no argument, no result); procedure 1 (S opaque bytes in, one int out — the shape of
//    most CUDA calls: arguments in, a cudaError_t back); procedure 2 (S opaque bytes in, the same S
//    out — the same payload as the raw ping-pong). The server registers its program without
//    rpcbind: it builds the service on a socket it bound itself (svc_vc_create, the TI-RPC
//    primitive under svctcp_create/svcunix_create), and the client reaches the known port or path
//    directly with clnttcp_create/clntunix_create (a port given means no portmapper query).
//
// Transports: a Unix stream socket and TCP over loopback with TCP_NODELAY on both ends. Every
// server is a separate process (fork), as a GPU server would be. Each case runs W warm-up calls,
// then R repeats of N calls; a repeat's figure is its wall time over N. Reported: the median repeat
// (and min/max), calls/s = 1e9 / median ns. Timings are wall-clock on a machine others may share;
// read the spread (min..max) before trusting a difference.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rpc/rpc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace {

using flyt::ErrnoError;
using flyt::Result;
using flyt::Status;
using flyt::UniqueFd;
using SteadyClock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// The RPC program the floor server registers (a number from the user-defined range 0x20000000+).
constexpr u_long kRpcProgram = 0x20464c59;  // "FLY"
constexpr u_long kRpcVersion = 1;
constexpr u_long kProcNull = 0;
constexpr u_long kProcArg = 1;
constexpr u_long kProcEcho = 2;
constexpr u_int kRpcMaxPayloadBytes = 1 << 20;

enum class Transport { kUnix, kTcp };

const char* TransportName(Transport t) { return t == Transport::kUnix ? "unix" : "tcp"; }

struct Options {
  int iterations = 20000;
  int repeats = 7;
  int warmup = 2000;
  std::vector<size_t> sizes = {32, 64, 128};
  size_t bulk_mib = 64;
  size_t chunk_kib = 256;
  std::vector<std::string> transports = {"unix", "tcp"};
  std::vector<std::string> cases = {"pingpong", "rpc", "bulk"};
  bool json = false;
};

// One row of the report. Latency rows fill the ns fields; bulk rows fill the MiB/s fields.
struct Row {
  std::string name;  // pingpong, rpc-null, rpc-arg, rpc-echo, bulk
  Transport transport = Transport::kUnix;
  size_t size_bytes = 0;  // payload per call (request; rpc-arg replies with 4 bytes)
  size_t chunk_bytes = 0;
  std::vector<double> ns_per_call;  // one per repeat
  std::vector<double> mib_per_s;    // one per repeat
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
double Min(const std::vector<double>& v) { return v.empty() ? 0 : *std::ranges::min_element(v); }
double Max(const std::vector<double>& v) { return v.empty() ? 0 : *std::ranges::max_element(v); }

// ---------------------------------------------------------------------------------------------
// Sockets.

// Where a server listens: a loopback TCP port or a Unix socket path.
struct Endpoint {
  Transport transport = Transport::kUnix;
  sockaddr_in in{};
  sockaddr_un un{};
};

Status WriteFull(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("send", errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Reads exactly `size` bytes. Returns false (with an OK status) on a clean EOF before any byte.
Result<bool> ReadFull(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::recv(fd, p + got, size - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("recv", errno);
    }
    if (n == 0) {
      if (got == 0) return false;
      return flyt::Internal("peer closed mid-message");
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

Status SetNoDelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return ErrnoError("setsockopt(TCP_NODELAY)", errno);
  }
  return Status::Ok();
}

// A listening socket on a fresh endpoint: 127.0.0.1 with a kernel-chosen port, or `unix_path`.
Result<UniqueFd> Listen(Transport transport, const std::string& unix_path, Endpoint* endpoint) {
  endpoint->transport = transport;
  const int family = transport == Transport::kUnix ? AF_UNIX : AF_INET;
  UniqueFd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket", errno);
  if (transport == Transport::kUnix) {
    sockaddr_un& un = endpoint->un;
    un = {};
    un.sun_family = AF_UNIX;
    if (unix_path.size() >= sizeof un.sun_path) {
      return flyt::InvalidArgument("unix socket path too long: " + unix_path);
    }
    std::memcpy(un.sun_path, unix_path.c_str(), unix_path.size() + 1);
    ::unlink(unix_path.c_str());
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&un), sizeof un) != 0) {
      return ErrnoError("bind " + unix_path, errno);
    }
  } else {
    sockaddr_in& in = endpoint->in;
    in = {};
    in.sin_family = AF_INET;
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    in.sin_port = 0;
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&in), sizeof in) != 0) {
      return ErrnoError("bind 127.0.0.1:0", errno);
    }
    socklen_t len = sizeof in;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&in), &len) != 0) {
      return ErrnoError("getsockname", errno);
    }
  }
  if (::listen(fd.get(), 16) != 0) return ErrnoError("listen", errno);
  return fd;
}

Result<UniqueFd> Connect(const Endpoint& endpoint) {
  const bool is_unix = endpoint.transport == Transport::kUnix;
  UniqueFd fd(::socket(is_unix ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoError("socket", errno);
  const auto* addr = is_unix ? reinterpret_cast<const sockaddr*>(&endpoint.un)
                             : reinterpret_cast<const sockaddr*>(&endpoint.in);
  const socklen_t len = is_unix ? sizeof endpoint.un : sizeof endpoint.in;
  if (::connect(fd.get(), addr, len) != 0) return ErrnoError("connect", errno);
  if (!is_unix) FLYT_RETURN_IF_ERROR(SetNoDelay(fd.get()));
  return fd;
}

Result<UniqueFd> Accept(int listener, Transport transport) {
  UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) return ErrnoError("accept", errno);
  if (transport == Transport::kTcp) FLYT_RETURN_IF_ERROR(SetNoDelay(fd.get()));
  return fd;
}

// ---------------------------------------------------------------------------------------------
// Server processes.

// A forked child running one server; the child dies with the parent (PR_SET_PDEATHSIG) and is
// stopped (SIGTERM) and reaped when this object goes. Move-only.
class ServerProcess {
 public:
  // Runs `body` in a child and _exits with its return value.
  static Result<ServerProcess> Start(const std::function<int()>& body) {
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return ErrnoError("fork", errno);
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::_exit(body());
    }
    return ServerProcess(pid);
  }

  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  ServerProcess(ServerProcess&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  ServerProcess& operator=(ServerProcess&&) = delete;
  ~ServerProcess() { Stop(); }

  // Waits for the child to exit by itself; its exit status must be 0.
  Status Wait() {
    if (pid_ < 0) return Status::Ok();
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0) {
      if (errno != EINTR) return ErrnoError("waitpid", errno);
    }
    pid_ = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return flyt::Internal("server process failed (status " + std::to_string(status) + ")");
    }
    return Status::Ok();
  }

 private:
  explicit ServerProcess(pid_t pid) : pid_(pid) {}
  void Stop() {
    if (pid_ < 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;
};

int ReportChildError(const Status& status) {
  std::fprintf(stderr, "server: %s\n", status.ToString().c_str());
  return 1;
}

// ---------------------------------------------------------------------------------------------
// Timing harness.

// Runs `call` warmup times, then `repeats` × `iterations` times; returns ns per call per repeat.
// `call` returns a Status; the first failure ends the run.
Result<std::vector<double>> TimeCalls(const Options& opt, const std::function<Status()>& call) {
  for (int i = 0; i < opt.warmup; ++i) FLYT_RETURN_IF_ERROR(call());
  std::vector<double> ns_per_call;
  for (int r = 0; r < opt.repeats; ++r) {
    const auto start = SteadyClock::now();
    for (int i = 0; i < opt.iterations; ++i) FLYT_RETURN_IF_ERROR(call());
    const std::chrono::duration<double, std::nano> elapsed = SteadyClock::now() - start;
    ns_per_call.push_back(elapsed.count() / opt.iterations);
  }
  return ns_per_call;
}

// ---------------------------------------------------------------------------------------------
// Raw socket floors.

Result<Row> PingPong(const Options& opt, Transport transport, const std::string& unix_path,
                     size_t size) {
  Endpoint endpoint;
  FLYT_ASSIGN_OR_RETURN(UniqueFd listener, Listen(transport, unix_path, &endpoint));
  FLYT_ASSIGN_OR_RETURN(ServerProcess server, ServerProcess::Start([&]() -> int {
                          auto conn = Accept(listener.get(), transport);
                          if (!conn.ok()) return ReportChildError(conn.status());
                          std::vector<char> buf(size);
                          for (;;) {
                            auto got = ReadFull(conn->get(), buf.data(), size);
                            if (!got.ok()) return ReportChildError(got.status());
                            if (!*got) return 0;
                            Status s = WriteFull(conn->get(), buf.data(), size);
                            if (!s.ok()) return ReportChildError(s);
                          }
                        }));
  listener.Reset();
  FLYT_ASSIGN_OR_RETURN(UniqueFd conn, Connect(endpoint));
  std::vector<char> out(size, 'x');
  std::vector<char> in(size);
  FLYT_ASSIGN_OR_RETURN(std::vector<double> ns, TimeCalls(opt, [&]() -> Status {
                          FLYT_RETURN_IF_ERROR(WriteFull(conn.get(), out.data(), size));
                          FLYT_ASSIGN_OR_RETURN(bool got, ReadFull(conn.get(), in.data(), size));
                          if (!got) return flyt::Internal("server closed the connection");
                          return Status::Ok();
                        }));
  conn.Reset();
  FLYT_RETURN_IF_ERROR(server.Wait());
  Row row;
  row.name = "pingpong";
  row.transport = transport;
  row.size_bytes = size;
  row.ns_per_call = std::move(ns);
  return row;
}

Result<Row> Bulk(const Options& opt, Transport transport, const std::string& unix_path) {
  const size_t total = opt.bulk_mib << 20;
  const size_t chunk = std::min(opt.chunk_kib << 10, total);
  const int rounds = 1 + opt.repeats;  // one warm-up round
  Endpoint endpoint;
  FLYT_ASSIGN_OR_RETURN(UniqueFd listener, Listen(transport, unix_path, &endpoint));
  FLYT_ASSIGN_OR_RETURN(ServerProcess server, ServerProcess::Start([&]() -> int {
                          auto conn = Accept(listener.get(), transport);
                          if (!conn.ok()) return ReportChildError(conn.status());
                          std::vector<char> buf(chunk);
                          for (int r = 0; r < rounds; ++r) {
                            for (size_t left = total; left > 0;) {
                              const size_t n = std::min(left, chunk);
                              auto got = ReadFull(conn->get(), buf.data(), n);
                              if (!got.ok()) return ReportChildError(got.status());
                              if (!*got) return ReportChildError(flyt::Internal("early EOF"));
                              left -= n;
                            }
                            const char ack = 'k';
                            Status s = WriteFull(conn->get(), &ack, 1);
                            if (!s.ok()) return ReportChildError(s);
                          }
                          return 0;
                        }));
  listener.Reset();
  FLYT_ASSIGN_OR_RETURN(UniqueFd conn, Connect(endpoint));
  std::vector<char> buf(chunk, 'x');
  Row row;
  row.name = "bulk";
  row.transport = transport;
  row.size_bytes = total;
  row.chunk_bytes = chunk;
  for (int r = 0; r < rounds; ++r) {
    const auto start = SteadyClock::now();
    for (size_t left = total; left > 0;) {
      const size_t n = std::min(left, chunk);
      FLYT_RETURN_IF_ERROR(WriteFull(conn.get(), buf.data(), n));
      left -= n;
    }
    char ack = 0;
    FLYT_ASSIGN_OR_RETURN(bool got, ReadFull(conn.get(), &ack, 1));
    if (!got) return flyt::Internal("server closed the connection");
    const std::chrono::duration<double> elapsed = SteadyClock::now() - start;
    if (r > 0) row.mib_per_s.push_back(static_cast<double>(opt.bulk_mib) / elapsed.count());
  }
  conn.Reset();
  FLYT_RETURN_IF_ERROR(server.Wait());
  return row;
}

// ---------------------------------------------------------------------------------------------
// ONC RPC (libtirpc) floors.

// Opaque bytes on the wire (XDR variable-length opaque: a 4-byte length, the bytes, padding).
struct Payload {
  char* data = nullptr;
  u_int size = 0;
};

bool_t XdrPayload(XDR* xdrs, Payload* p) {
  return xdr_bytes(xdrs, &p->data, &p->size, kRpcMaxPayloadBytes);
}

// tirpc's xdrproc_t is variadic and xdr_void takes no arguments; the detour through void(*)()
// is the cast GCC accepts between unrelated function types (the call ABI is the same).
template <typename F>
xdrproc_t XdrProc(F* f) {
  return reinterpret_cast<xdrproc_t>(reinterpret_cast<void (*)()>(f));
}

// The server's dispatch: NULL, ARG (payload in, int out), ECHO (payload in, payload out). The
// payload decodes into a buffer owned by the server process (no malloc per call).
void Dispatch(svc_req* request, SVCXPRT* xprt) {
  static std::vector<char> buffer(kRpcMaxPayloadBytes);  // the child process's one decode buffer
  switch (request->rq_proc) {
    case kProcNull:
      svc_sendreply(xprt, XdrProc(xdr_void), nullptr);
      return;
    case kProcArg:
    case kProcEcho: {
      Payload payload{buffer.data(), 0};
      if (!svc_getargs(xprt, XdrProc(XdrPayload), reinterpret_cast<caddr_t>(&payload))) {
        svcerr_decode(xprt);
        return;
      }
      if (request->rq_proc == kProcArg) {
        int result = 0;
        svc_sendreply(xprt, XdrProc(xdr_int), reinterpret_cast<char*>(&result));
      } else {
        svc_sendreply(xprt, XdrProc(XdrPayload), reinterpret_cast<char*>(&payload));
      }
      return;
    }
    default:
      svcerr_noproc(xprt);
  }
}

// A CLIENT* with clnt_destroy on destruction.
struct ClientDeleter {
  void operator()(CLIENT* client) const {
    if (client != nullptr) clnt_destroy(client);
  }
};
using RpcClient = std::unique_ptr<CLIENT, ClientDeleter>;

// Connects to the floor server at `endpoint` without rpcbind. For TCP the socket is ours (so it
// gets TCP_NODELAY like the raw floor's); tirpc adopts it and closes it in clnt_destroy.
Result<RpcClient> RpcConnect(Endpoint endpoint) {
  int sock = RPC_ANYSOCK;
  CLIENT* client = nullptr;
  if (endpoint.transport == Transport::kTcp) {
    FLYT_ASSIGN_OR_RETURN(UniqueFd fd, Connect(endpoint));
    sock = fd.Release();
    client = clnttcp_create(&endpoint.in, kRpcProgram, kRpcVersion, &sock, 0, 0);
    if (client == nullptr) ::close(sock);
  } else {
    client = clntunix_create(&endpoint.un, kRpcProgram, kRpcVersion, &sock, 0, 0);
  }
  if (client == nullptr) {
    return flyt::Unavailable(std::string("tirpc client: ") + clnt_spcreateerror("create"));
  }
  // clnttcp_create adopts a given socket without taking ownership; make clnt_destroy close it.
  clnt_control(client, CLSET_FD_CLOSE, nullptr);
  return RpcClient(client);
}

Status RpcCall(CLIENT* client, u_long proc, xdrproc_t in_proc, void* in, xdrproc_t out_proc,
               void* out) {
  const timeval timeout{30, 0};
  const clnt_stat stat = clnt_call(client, proc, in_proc, static_cast<char*>(in), out_proc,
                                   static_cast<char*>(out), timeout);
  if (stat != RPC_SUCCESS) {
    return flyt::Internal(std::string("clnt_call: ") + clnt_sperrno(stat));
  }
  return Status::Ok();
}

// One RPC server process, serving every case of one transport; the rows for that transport.
Result<std::vector<Row>> RpcCases(const Options& opt, Transport transport,
                                  const std::string& unix_path) {
  Endpoint endpoint;
  FLYT_ASSIGN_OR_RETURN(UniqueFd listener, Listen(transport, unix_path, &endpoint));
  FLYT_ASSIGN_OR_RETURN(ServerProcess server, ServerProcess::Start([&]() -> int {
                          // svc_vc_create adopts the bound, listening socket; no rpcbind: the
                          // protocol argument 0 means "do not register with the portmapper".
                          SVCXPRT* xprt = svc_vc_create(listener.Release(), 0, 0);
                          if (xprt == nullptr) {
                            std::fprintf(stderr, "server: svc_vc_create failed\n");
                            return 1;
                          }
                          if (!svc_register(xprt, kRpcProgram, kRpcVersion, Dispatch, 0)) {
                            std::fprintf(stderr, "server: svc_register failed\n");
                            return 1;
                          }
                          svc_run();  // returns only on error
                          return 1;
                        }));
  listener.Reset();
  FLYT_ASSIGN_OR_RETURN(RpcClient client, RpcConnect(endpoint));
  auto xdr_void_proc = XdrProc(xdr_void);
  auto xdr_int_proc = XdrProc(xdr_int);
  auto xdr_payload_proc = XdrProc(XdrPayload);

  std::vector<Row> rows;
  {
    FLYT_ASSIGN_OR_RETURN(std::vector<double> ns, TimeCalls(opt, [&]() -> Status {
                            return RpcCall(client.get(), kProcNull, xdr_void_proc, nullptr,
                                           xdr_void_proc, nullptr);
                          }));
    Row row;
    row.name = "rpc-null";
    row.transport = transport;
    row.ns_per_call = std::move(ns);
    rows.push_back(std::move(row));
  }
  for (const char* name : {"rpc-arg", "rpc-echo"}) {
    const bool echo = std::strcmp(name, "rpc-echo") == 0;
    for (size_t size : opt.sizes) {
      std::vector<char> out(size, 'x');
      std::vector<char> in(size);
      Payload request{out.data(), static_cast<u_int>(size)};
      FLYT_ASSIGN_OR_RETURN(
          std::vector<double> ns, TimeCalls(opt, [&]() -> Status {
            if (echo) {
              Payload reply{in.data(), 0};
              FLYT_RETURN_IF_ERROR(RpcCall(client.get(), kProcEcho, xdr_payload_proc, &request,
                                           xdr_payload_proc, &reply));
              if (reply.size != size) return flyt::Internal("short echo");
              return Status::Ok();
            }
            int result = -1;
            return RpcCall(client.get(), kProcArg, xdr_payload_proc, &request, xdr_int_proc,
                           &result);
          }));
      Row row;
      row.name = name;
      row.transport = transport;
      row.size_bytes = size;
      row.ns_per_call = std::move(ns);
      rows.push_back(std::move(row));
    }
  }
  return rows;  // ~ServerProcess stops the server (svc_run never returns by itself)
}

// ---------------------------------------------------------------------------------------------
// Report.

void PrintTable(const Options& opt, const std::vector<Row>& rows) {
  std::printf(
      "Remote-call floors: %d calls x %d repeats (+%d warm-up) per row; median of repeats\n\n",
      opt.iterations, opt.repeats, opt.warmup);
  std::printf("| case | transport | payload B | median ns/call | min | max | calls/s |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  for (const Row& row : rows) {
    if (row.ns_per_call.empty()) continue;
    const double median = Median(row.ns_per_call);
    std::printf("| %s | %s | %zu | %.0f | %.0f | %.0f | %.0f |\n", row.name.c_str(),
                TransportName(row.transport), row.size_bytes, median, Min(row.ns_per_call),
                Max(row.ns_per_call), median > 0 ? 1e9 / median : 0);
  }
  bool header = false;
  for (const Row& row : rows) {
    if (row.mib_per_s.empty()) continue;
    if (!header) {
      std::printf("\n| bulk | transport | MiB | chunk KiB | median MiB/s | min | max |\n");
      std::printf("|---|---|---:|---:|---:|---:|---:|\n");
      header = true;
    }
    std::printf("| %s | %s | %zu | %zu | %.0f | %.0f | %.0f |\n", row.name.c_str(),
                TransportName(row.transport), row.size_bytes >> 20, row.chunk_bytes >> 10,
                Median(row.mib_per_s), Min(row.mib_per_s), Max(row.mib_per_s));
  }
}

void PrintJson(const Options& opt, const std::vector<Row>& rows) {
  utsname uts{};
  ::uname(&uts);
  nlohmann::json results = nlohmann::json::array();
  for (const Row& row : rows) {
    nlohmann::json r = {{"case", row.name},
                        {"transport", TransportName(row.transport)},
                        {"payload_bytes", row.size_bytes}};
    if (!row.ns_per_call.empty()) {
      const double median = Median(row.ns_per_call);
      r["median_ns"] = median;
      r["min_ns"] = Min(row.ns_per_call);
      r["max_ns"] = Max(row.ns_per_call);
      r["calls_per_s"] = median > 0 ? 1e9 / median : 0;
      r["ns_per_repeat"] = row.ns_per_call;
    } else {
      r["chunk_bytes"] = row.chunk_bytes;
      r["median_mib_per_s"] = Median(row.mib_per_s);
      r["min_mib_per_s"] = Min(row.mib_per_s);
      r["max_mib_per_s"] = Max(row.mib_per_s);
      r["mib_per_s_per_repeat"] = row.mib_per_s;
    }
    results.push_back(std::move(r));
  }
  nlohmann::json doc = {{"benchmark", "remote_floor"},  {"host", uts.nodename},
                        {"kernel", uts.release},        {"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)},
                        {"iterations", opt.iterations}, {"repeats", opt.repeats},
                        {"warmup", opt.warmup},         {"results", std::move(results)}};
  std::printf("%s\n", doc.dump(2).c_str());
}

bool Wants(const std::vector<std::string>& list, const std::string& item) {
  return std::ranges::find(list, item) != list.end();
}

// A private directory for the Unix sockets, removed on destruction.
class TempDir {
 public:
  static Result<TempDir> Make() {
    std::string templ = (fs::temp_directory_path() / "flyt-floor-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) return ErrnoError("mkdtemp", errno);
    return TempDir(templ);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  std::string Socket(const std::string& name) const { return path_ + "/" + name; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

Status Run(const Options& opt) {
  FLYT_ASSIGN_OR_RETURN(TempDir dir, TempDir::Make());
  std::vector<Transport> transports;
  if (Wants(opt.transports, "unix")) transports.push_back(Transport::kUnix);
  if (Wants(opt.transports, "tcp")) transports.push_back(Transport::kTcp);
  std::vector<Row> rows;
  for (Transport t : transports) {
    const std::string path = dir.Socket(std::string(TransportName(t)) + ".sock");
    if (Wants(opt.cases, "pingpong")) {
      for (size_t size : opt.sizes) {
        FLYT_ASSIGN_OR_RETURN(Row row, PingPong(opt, t, path, size));
        rows.push_back(std::move(row));
      }
    }
    if (Wants(opt.cases, "rpc")) {
      FLYT_ASSIGN_OR_RETURN(std::vector<Row> rpc, RpcCases(opt, t, path));
      for (Row& row : rpc) rows.push_back(std::move(row));
    }
    if (Wants(opt.cases, "bulk")) {
      FLYT_ASSIGN_OR_RETURN(Row row, Bulk(opt, t, path));
      rows.push_back(std::move(row));
    }
  }
  if (opt.json) {
    PrintJson(opt, rows);
  } else {
    PrintTable(opt, rows);
  }
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "flyt-bench-remote-floor — round-trip floors (raw sockets, ONC RPC) for remote CUDA"};
  app.add_option("--iterations,-n", opt.iterations, "calls per repeat")->check(CLI::PositiveNumber);
  app.add_option("--repeats,-r", opt.repeats, "repeats per case (median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "untimed calls before each case")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--sizes", opt.sizes, "payload sizes in bytes (ping-pong, rpc-arg, rpc-echo)")
      ->delimiter(',')
      ->check(CLI::Range(size_t{1}, size_t{kRpcMaxPayloadBytes}));
  app.add_option("--bulk-mib", opt.bulk_mib, "MiB streamed per bulk repeat")
      ->check(CLI::PositiveNumber);
  app.add_option("--chunk-kib", opt.chunk_kib, "bulk write size in KiB")
      ->check(CLI::PositiveNumber);
  app.add_option("--transports", opt.transports, "unix, tcp")
      ->delimiter(',')
      ->check(CLI::IsMember({"unix", "tcp"}));
  app.add_option("--cases", opt.cases, "pingpong, rpc, bulk")
      ->delimiter(',')
      ->check(CLI::IsMember({"pingpong", "rpc", "bulk"}));
  app.add_flag("--json", opt.json, "print JSON instead of Markdown tables");
  CLI11_PARSE(app, argc, argv);

  ::signal(SIGPIPE, SIG_IGN);
  Status status = Run(opt);
  if (!status.ok()) {
    std::fprintf(stderr, "flyt-bench-remote-floor: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
