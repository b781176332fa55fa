// Live migration on the sim backend (issue 18): how long a client with 256 MiB, 1 GiB and 4 GiB of
// device memory is paused when it moves between two servers, and the whole move, side by side
// with the machine's memcpy of the same bytes (the floor: the sim's device memory is host memory,
// so a move is bounded by memory bandwidth and the loopback socket).
//
//   build/bin/flyt-bench-migrate [--sizes-mib 256,1024,4096] [--repeats R] [--json]
//
// Two in-process flyt Servers with a process per client (what flyt-gpu-server runs), on Unix
// sockets. The client fills its memory, then the operator's MigrateClient call is made; figures
// per size (medians over R moves, back and forth between the servers):
//  - pause: what the program sees, the call that carried the notice, from its start to its
//    return on the new server (Migrate, the state and bytes moved, the new hello);
//  - server: the old server's own part of it (Migrate's answer time);
//  - total: from the operator's request to its answer;
//  - memcpy: one memcpy of the same bytes between two touched buffers;
//  - resize: before the moves, R resizes of the same client's server (ResizeServer: SM share 64,
//    132, 64, ...): the longest call the program saw while one was answered (resize ms), and the
//    client's own pause to apply it at its clean point as the server measured it (apply us;
//    whole microseconds).
// Wall-clock on a shared machine: compare within one run and read the spread.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "remote_client/client.h"
#include "remote_client/debug_stats.h"
#include "remote_server/server.h"
#include "remote_sim/sim_backend.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace flyt::remote;

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "flyt-bench-migrate: %s\n", why.c_str());
  std::exit(1);
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::unique_ptr<Server> StartServer(const std::filesystem::path& sock, const std::string& label) {
  ServerOptions options;
  options.label = label;
  options.listen.push_back(*ParseEndpoint("unix:" + sock.string()));
  options.shared_memory = false;
  SimOptions sim;
  sim.memory_bytes = 64ull << 30;
  auto server = std::make_unique<Server>(
      [sim]() -> flyt::Result<std::unique_ptr<Backend>> { return MakeSimBackend(sim); }, options);
  if (flyt::Status s = server->Start(); !s.ok()) Die(s.ToString());
  return server;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"flyt-bench-migrate: live migration's pause and total time on the sim backend"};
  std::string sizes_text = "256,1024,4096";
  int repeats = 3;
  bool json = false;
  app.add_option("--sizes-mib", sizes_text, "device memory of the client, MiB, comma-separated");
  app.add_option("--repeats", repeats, "moves per size")->check(CLI::Range(1, 100));
  app.add_flag("--json", json, "one JSON object instead of the table");
  CLI11_PARSE(app, argc, argv);
  std::vector<uint64_t> sizes;
  std::stringstream in(sizes_text);
  for (std::string part; std::getline(in, part, ',');) sizes.push_back(std::stoull(part));

  auto dir = std::filesystem::temp_directory_path() / ("flyt-bench-migrate-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::unique_ptr<Server> servers[2] = {StartServer(dir / "a.sock", "a"),
                                        StartServer(dir / "b.sock", "b")};
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (!json) {
    std::printf("%-10s %12s %12s %12s %12s %10s %10s %10s\n", "device", "pause ms", "server ms",
                "total ms", "memcpy ms", "pause/memcpy", "resize ms", "apply us");
    std::fflush(stdout);  // not again from the client processes the servers fork
  }
  for (uint64_t mib : sizes) {
    const uint64_t bytes = mib << 20;
    ClientOptions options;
    options.label = "flyt-bench-migrate";
    options.shared_memory = false;
    auto opened = Connection::Open(servers[0]->endpoints()[0], options);
    if (!opened.ok()) Die(opened.status().ToString());
    Connection& conn = **opened;
    // The memory, in 256 MiB allocations, filled.
    std::vector<std::byte> chunk(std::min<uint64_t>(bytes, 256ull << 20), std::byte{0x5A});
    for (uint64_t done = 0; done < bytes; done += chunk.size()) {
      auto p = conn.Malloc({chunk.size()});
      if (!p.ok()) Die(p.status().ToString());
      if (!conn.MemcpyHtoD({p->ptr, chunk.size(), 0}, chunk).ok()) Die("fill");
    }
    // Resizes of the client's server while the client makes calls.
    std::vector<double> resize_pause, resize_apply;
    for (int r = 0; r < repeats; ++r) {
      const uint32_t sms = r % 2 == 0 ? 64 : 132;
      Endpoint at_server = servers[0]->endpoints()[0];
      auto answer = std::async(std::launch::async, [=] {
        return RequestResize(at_server, "", sms, std::nullopt, 600'000);
      });
      double longest = 0;
      while (answer.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
        const Clock::time_point t0 = Clock::now();
        if (!conn.MemGetInfo({}).ok()) Die("a call failed during the resize");
        longest = std::max(longest, Ms(Clock::now() - t0));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      auto reply = answer.get();
      // (The previous size's client may still be counted while its connection ends.)
      if (!reply.ok() || reply->clients_applied == 0 || reply->clients_pending != 0) {
        Die(reply.ok() ? reply->message : reply.status().ToString());
      }
      resize_pause.push_back(longest);
      resize_apply.push_back(reply->pause_ms_max);
    }
    std::vector<double> pause, server, total;
    int at = 0;
    for (int r = 0; r < repeats; ++r) {
      const int to = 1 - at;
      const uint64_t id = conn.server().client_id;
      Endpoint from = servers[at]->endpoints()[0];
      std::string target = servers[to]->endpoints()[0].ToString();
      const Clock::time_point asked = Clock::now();
      auto answer = std::async(std::launch::async, [=] {
        return RequestMigration(from, "", id, target, "", 600'000);
      });
      double longest = 0;
      while (answer.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
        const Clock::time_point t0 = Clock::now();
        if (!conn.MemGetInfo({}).ok()) Die("a call failed during the move");
        longest = std::max(longest, Ms(Clock::now() - t0));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      auto reply = answer.get();
      const double whole = Ms(Clock::now() - asked);
      if (!reply.ok() || reply->outcome != "moved") {
        Die(reply.ok() ? reply->message : reply.status().ToString());
      }
      pause.push_back(longest);
      server.push_back(static_cast<double>(reply->pause_us) / 1000.0);
      total.push_back(whole);
      at = to;
    }
    std::vector<double> copies;
    {
      std::vector<std::byte> a(bytes, std::byte{1}), b(bytes, std::byte{2});
      for (int r = 0; r < repeats; ++r) {
        const Clock::time_point t0 = Clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        copies.push_back(Ms(Clock::now() - t0));
      }
    }
    const double p = Median(pause), s = Median(server), t = Median(total), c = Median(copies);
    const double rp = Median(resize_pause), ra = Median(resize_apply);
    if (json) {
      out.push_back({{"device_mib", mib}, {"pause_ms", p}, {"server_ms", s}, {"total_ms", t},
                     {"memcpy_ms", c}, {"resize_pause_ms", rp}, {"resize_apply_ms", ra}});
    } else {
      std::printf("%-10s %12.1f %12.1f %12.1f %12.1f %10.2f %10.3f %10.0f\n",
                  (std::to_string(mib) + " MiB").c_str(), p, s, t, c, c > 0 ? p / c : 0, rp, ra * 1000);
      std::fflush(stdout);
    }
  }
  if (json) std::printf("%s\n", out.dump().c_str());
  for (auto& s : servers) s->Stop();
  std::filesystem::remove_all(dir);
  return 0;
}
