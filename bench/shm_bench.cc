// The shared-memory transport against the sockets (issue 18), side by side in one run on the sim
// backend, so that the transport is all that is measured:
//
//   build/bin/flyt-bench-shm [--calls N] [--repeats R] [--mib M] [--json]
//
// Cases (each a median over R repeats; min and max beside it):
//  - sync call: the protocol's no-op Sync call, N times, over shared memory and over the Unix
//    socket (the same server, FLYT_SHM=0's client option); and the floor, a raw 16-byte ping-pong
//    over a Unix socketpair with a forked echo process.
//  - copies of M MiB (default 64) host-to-device and device-to-host: from/into the shared arena
//    (pinned memory: one memcpy on the sim), registered memory staged through the arena (one more
//    memcpy on the client's side), pageable through the rings, pageable over the Unix
//    socket; and the floor, the machine's own memcpy of M MiB between two touched buffers.
// The server is an in-process flyt Server with a process per client (what flyt-gpu-server runs),
// so every call crosses a process boundary. Timings are wall-clock on a shared machine: compare
// ratios within one run, and read the spread.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "remote_client/client.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

namespace {

using Clock = std::chrono::steady_clock;
using flyt::remote::Connection;

struct Figure {
  double median = 0, min = 0, max = 0;  // per unit: ns per call, or MiB/s
};

// Runs `once` R times; each run's figure is `per(seconds)`.
Figure Measure(int repeats, const std::function<void()>& once,
               const std::function<double(double)>& per) {
  std::vector<double> v;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = Clock::now();
    once();
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    v.push_back(per(s));
  }
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "flyt-bench-shm: %s\n", why.c_str());
  std::exit(1);
}

std::unique_ptr<Connection> Open(const flyt::remote::Endpoint& e, bool shm) {
  flyt::remote::ClientOptions o;
  o.label = "flyt-bench-shm";
  o.pid = static_cast<uint32_t>(::getpid());
  o.shared_memory = shm;
  auto c = Connection::Open(e, o);
  if (!c.ok()) Die(c.status().ToString());
  if ((*c)->transport() != (shm ? "shm" : "unix")) Die("unexpected transport " +
                                                        std::string((*c)->transport()));
  return std::move(c).value();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flyt-bench-shm: the shared-memory transport against the Unix socket (sim)"};
  int calls = 20000, repeats = 7;
  uint64_t mib = 64;
  bool json = false;
  app.add_option("--calls", calls, "sync calls per repeat")->check(CLI::Range(100, 10000000));
  app.add_option("--repeats", repeats, "repeats per case (the median is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--mib", mib, "MiB per copy")->check(CLI::Range(1, 1024));
  app.add_flag("--json", json, "one JSON object instead of a table");
  CLI11_PARSE(app, argc, argv);
  const uint64_t bytes = mib << 20;

  auto dir = std::filesystem::temp_directory_path() / ("flyt-bench-shm-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  flyt::remote::ServerOptions options;
  options.listen.push_back(*flyt::remote::ParseEndpoint("unix:" + (dir / "s.sock").string()));
  options.shm_layout.arena_bytes = std::max<uint64_t>(256ull << 20, 2 * bytes + (1 << 20));
  flyt::remote::Server server(
      []() -> flyt::Result<std::unique_ptr<flyt::remote::Backend>> {
        return flyt::remote::MakeSimBackend();
      },
      options);
  if (auto s = server.Start(); !s.ok()) Die(s.ToString());
  const flyt::remote::Endpoint endpoint = server.endpoints()[0];
  auto shm = Open(endpoint, true);
  auto unix_conn = Open(endpoint, false);

  nlohmann::ordered_json out;
  auto per_call = [&](double s) { return s * 1e9 / calls; };
  auto per_mib = [&](double s) { return static_cast<double>(mib) / s; };
  auto sync_loop = [&](Connection& c) {
    return [&c, calls] {
      for (int i = 0; i < calls; ++i) {
        if (!c.Sync({}).ok()) Die("sync call failed");
      }
    };
  };
  // Warm both up.
  sync_loop(*shm)();
  sync_loop(*unix_conn)();
  Figure call_shm = Measure(repeats, sync_loop(*shm), per_call);
  Figure call_unix = Measure(repeats, sync_loop(*unix_conn), per_call);

  // The floor: a raw 16-byte ping-pong over a socketpair, the echo in a child process.
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) Die("socketpair");
  pid_t echo = ::fork();
  if (echo == 0) {
    ::close(sv[0]);
    char b[16];
    while (::recv(sv[1], b, sizeof b, MSG_WAITALL) == sizeof b) {
      if (::send(sv[1], b, sizeof b, 0) != sizeof b) break;
    }
    ::_exit(0);
  }
  ::close(sv[1]);
  Figure call_raw = Measure(
      repeats,
      [&] {
        char b[16] = {};
        for (int i = 0; i < calls; ++i) {
          if (::send(sv[0], b, sizeof b, 0) != sizeof b ||
              ::recv(sv[0], b, sizeof b, MSG_WAITALL) != sizeof b) {
            Die("ping-pong");
          }
        }
      },
      per_call);
  ::close(sv[0]);
  ::waitpid(echo, nullptr, 0);

  // Copies.
  auto dev_shm = shm->Malloc({bytes});
  auto dev_unix = unix_conn->Malloc({bytes});
  if (!dev_shm.ok() || !dev_unix.ok()) Die("device allocation");
  flyt::remote::SharedArena arena = shm->arena();
  std::memset(arena.base, 1, 2 * bytes);  // touch the arena's pages once, as a program's would be
  std::vector<std::byte> host(bytes, std::byte{2}), back(bytes);
  auto check = [](const flyt::remote::CudaStatus& s) {
    if (!s.ok()) Die(s.ToString());
  };
  Figure h2d_pinned = Measure(
      repeats, [&] { check(shm->MemcpyHtoDShared({dev_shm->ptr, 0, bytes, 0}).status()); },
      per_mib);
  Figure d2h_pinned = Measure(
      repeats, [&] { check(shm->MemcpyDtoHShared({bytes, dev_shm->ptr, bytes, 0}).status()); },
      per_mib);
  // cudaHostRegister'd memory as the runtime stages it (protocol 8, runtime/api_memory.cc), in
  // 4 MiB pieces: up, each copied into the range's copy in the arena and posted as it is (the
  // last one a call); down, each copied on from the arena while the server does the next.
  Figure h2d_staged = Measure(
      repeats,
      [&] {
        constexpr uint64_t kPiece = 4 << 20;
        for (uint64_t off = 0; off < bytes; off += kPiece) {
          const uint64_t n = std::min(kPiece, bytes - off);
          std::memcpy(arena.base + off, host.data() + off, n);
          if (off + n == bytes) {
            check(shm->MemcpyHtoDShared({dev_shm->ptr + off, off, n, 0}).status());
          } else {
            check(shm->MemcpyHtoDSharedAsync({dev_shm->ptr + off, off, n, 0}));
            check(shm->Flush());
          }
        }
      },
      per_mib);
  Figure d2h_staged = Measure(
      repeats,
      [&] {
        constexpr uint64_t kPiece = 4 << 20;
        uint64_t ready = std::min(kPiece, bytes), done = 0;
        check(shm->MemcpyDtoHShared({bytes, dev_shm->ptr, ready, 0}).status());
        while (ready < bytes) {
          const uint64_t n = std::min(kPiece, bytes - ready);
          check(shm->MemcpyDtoHSharedAsync({bytes + ready, dev_shm->ptr + ready, n, 0}));
          check(shm->Flush());
          std::memcpy(back.data() + done, arena.base + bytes + done, ready - done);
          done = ready;
          check(shm->StreamSynchronize({0}).status());
          ready += n;
        }
        std::memcpy(back.data() + done, arena.base + bytes + done, ready - done);
      },
      per_mib);
  Figure h2d_ring = Measure(
      repeats, [&] { check(shm->MemcpyHtoD({dev_shm->ptr, bytes, 0}, host).status()); }, per_mib);
  Figure d2h_ring = Measure(
      repeats, [&] { check(shm->MemcpyDtoH({dev_shm->ptr, bytes, 0}, back).status()); }, per_mib);
  Figure h2d_unix = Measure(
      repeats, [&] { check(unix_conn->MemcpyHtoD({dev_unix->ptr, bytes, 0}, host).status()); },
      per_mib);
  Figure d2h_unix = Measure(
      repeats, [&] { check(unix_conn->MemcpyDtoH({dev_unix->ptr, bytes, 0}, back).status()); },
      per_mib);
  std::vector<std::byte> a(bytes, std::byte{3}), b(bytes, std::byte{4});
  Figure memcpy_bw = Measure(repeats, [&] { std::memcpy(b.data(), a.data(), bytes); }, per_mib);

  shm.reset();
  unix_conn.reset();
  server.Stop();
  std::filesystem::remove_all(dir);

  auto row = [&](const char* name, const Figure& f, const char* unit) {
    out[name] = {{"median", f.median}, {"min", f.min}, {"max", f.max}, {"unit", unit}};
  };
  row("sync_call_shm", call_shm, "ns");
  row("sync_call_unix", call_unix, "ns");
  row("sync_call_raw_pingpong", call_raw, "ns");
  row("h2d_pinned_shm", h2d_pinned, "MiB/s");
  row("d2h_pinned_shm", d2h_pinned, "MiB/s");
  row("h2d_registered_shm", h2d_staged, "MiB/s");
  row("d2h_registered_shm", d2h_staged, "MiB/s");
  row("h2d_pageable_shm", h2d_ring, "MiB/s");
  row("d2h_pageable_shm", d2h_ring, "MiB/s");
  row("h2d_pageable_unix", h2d_unix, "MiB/s");
  row("d2h_pageable_unix", d2h_unix, "MiB/s");
  row("memcpy", memcpy_bw, "MiB/s");
  out["ratio_sync_unix_over_shm"] = call_unix.median / call_shm.median;
  out["ratio_h2d_pinned_over_memcpy"] = h2d_pinned.median / memcpy_bw.median;
  out["ratio_d2h_pinned_over_memcpy"] = d2h_pinned.median / memcpy_bw.median;
  out["calls"] = calls;
  out["repeats"] = repeats;
  out["mib"] = mib;
  if (json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%-24s %12s %12s %12s\n", "case", "median", "min", "max");
  for (auto& [name, v] : out.items()) {
    if (!v.is_object()) continue;
    std::printf("%-24s %12.1f %12.1f %12.1f %s\n", name.c_str(), v["median"].get<double>(),
                v["min"].get<double>(), v["max"].get<double>(),
                v["unit"].get<std::string>().c_str());
  }
  std::printf("sync call: Unix socket / shm = %.2fx; pinned over shm / memcpy: H2D %.0f %%, D2H "
              "%.0f %%\n",
              out["ratio_sync_unix_over_shm"].get<double>(),
              100 * out["ratio_h2d_pinned_over_memcpy"].get<double>(),
              100 * out["ratio_d2h_pinned_over_memcpy"].get<double>());
  return 0;
}
