// Real uprobes on real processes: the fake CUDA runtime (testdata/) run under the tracer. Needs
// root and BPF; skips with the reason elsewhere.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "trace/aggregator.h"
#include "trace/bpf/events.h"
#include "trace/raw_record.h"
#include "trace/tracer.h"

namespace flyt::trace {
namespace {

using nlohmann::json;

class CollectingSink : public RecordSink {
 public:
  void OnRecord(const void* data, size_t bytes) override {
    json j = RecordToJson(data, bytes);
    MutexLock lock(mu_);
    records_.push_back(std::move(j));
  }
  void OnAttachedLate(uint32_t pid, const std::string& library) override {
    MutexLock lock(mu_);
    late_.emplace_back(pid, library);
  }
  void OnDrainEnd() override {}

  // The call records and EXIT of `pid`, in ring order.
  std::vector<json> CallsOf(uint32_t pid) {
    MutexLock lock(mu_);
    std::vector<json> out;
    for (const json& j : records_) {
      if (j["pid"] != pid) continue;
      std::string kind = j["kind"];
      if (kind == "exec" || kind == "library_open" || kind == "setenv" || kind == "environ") {
        continue;
      }
      out.push_back(j);
    }
    return out;
  }
  bool SawExit(uint32_t pid) {
    for (const json& j : CallsOf(pid)) {
      if (j["kind"] == "exit") return true;
    }
    return false;
  }
  // The paths of the LIBRARY_OPEN records of `pid`.
  std::vector<std::string> OpensOf(uint32_t pid) {
    MutexLock lock(mu_);
    std::vector<std::string> out;
    for (const json& j : records_) {
      if (j["pid"] == pid && j["kind"] == "library_open") out.push_back(j["path"]);
    }
    return out;
  }
  std::vector<std::pair<uint32_t, std::string>> Late() {
    MutexLock lock(mu_);
    return late_;
  }

 private:
  Mutex mu_;
  std::vector<json> records_ FLYT_GUARDED_BY(mu_);
  std::vector<std::pair<uint32_t, std::string>> late_ FLYT_GUARDED_BY(mu_);
};

// Keeps every record until HandOn: a drain thread that comes late, as on a loaded machine, and
// reaches a program's records only after the program is gone.
class HoldingSink : public RecordSink {
 public:
  void OnRecord(const void* data, size_t bytes) override {
    const auto* p = static_cast<const unsigned char*>(data);
    flyt_trace_header h{};
    if (bytes >= sizeof(h)) std::memcpy(&h, data, sizeof(h));
    MutexLock lock(mu_);
    records_.emplace_back(p, p + bytes);
    if (h.kind == FLYT_EV_EXIT) exited_.push_back(h.pid);
  }
  void OnAttachedLate(uint32_t, const std::string&) override {}
  void OnDrainEnd() override {}
  bool SawExit(uint32_t pid) {
    MutexLock lock(mu_);
    return std::find(exited_.begin(), exited_.end(), pid) != exited_.end();
  }
  // The records of `pid` as --raw shows them.
  std::vector<json> RecordsOf(uint32_t pid) {
    MutexLock lock(mu_);
    std::vector<json> out;
    for (const auto& r : records_) {
      json j = RecordToJson(r.data(), r.size());
      if (j["pid"] == pid) out.push_back(std::move(j));
    }
    return out;
  }
  void HandOn(RecordSink& next) {
    MutexLock lock(mu_);
    for (const auto& r : records_) next.OnRecord(r.data(), r.size());
    next.OnDrainEnd();
  }

 private:
  Mutex mu_;
  std::vector<std::vector<unsigned char>> records_ FLYT_GUARDED_BY(mu_);
  std::vector<uint32_t> exited_ FLYT_GUARDED_BY(mu_);
};

pid_t Spawn(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

int Wait(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

template <typename F>
bool Eventually(F f, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return f();
}

TraceOptions TestOptions() {
  TraceOptions o;
  o.library_dirs = {FLYT_TRACE_FAKE_DIR};
  o.ld_so_conf.clear();  // the fake libraries only, not this machine's
  o.watch_setenv = false;
  o.ring_buffer_bytes = 1 << 20;
  o.drain_interval_ms = 50;
  return o;
}

// The fake CUDA shared libraries among the files probed. Only those: tracing is system-wide, so a
// test running beside this one (ctest -j) can have a fake static program of the same folder
// probed too, and that is right.
size_t FakeLibraries(const TracerHealth& h) {
  size_t n = 0;
  for (const std::string& lib : h.libraries) {
    if (lib.find("trace_fake_cuda/lib") != std::string::npos) ++n;
  }
  return n;
}

class TracerBpfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Status support = Tracer::CheckSupport();
    if (!support.ok()) GTEST_SKIP() << support.message();
  }
};

// What fake_app's `run` must leave, record by record.
struct RunExpectation {
  const char* library = "nvidia_runtime";  // the runtime's library class
  bool driver_probed = true;    // libcuda.so.1 is a probed library (not compiled in)
  bool launch_results = false;  // TraceOptions.launch_results
};

void ExpectRunRecords(const std::vector<json>& r, RunExpectation e = {}) {
  const size_t n = e.driver_probed ? 16 : 15;
  ASSERT_EQ(r.size(), n) << json(r).dump(1);
  auto expect = [&](size_t i, const char* kind, const char* func, int rc) {
    EXPECT_EQ(r[i]["kind"], kind) << i;
    EXPECT_EQ(r[i]["func"], func) << i;
    EXPECT_EQ(r[i]["rc"], rc) << i;
    EXPECT_EQ(r[i]["tid"], r[i]["pid"]) << i;
  };
  // Launches are written at entry (rc 0, flag 4) unless their results are asked for, or the
  // runtime is linked into the executable (its launches keep their return probes).
  auto expect_launch = [&](size_t i, const char* func, int rc, const char* library) {
    const bool at_entry = !e.launch_results && std::string(library) != "static_runtime";
    expect(i, "launch", func, at_entry ? 0 : rc);
    EXPECT_EQ(r[i]["library"], library) << i;
    EXPECT_EQ((r[i]["flags"].get<int>() & FLYT_F_AT_ENTRY) != 0, at_entry) << i;
  };
  expect(0, "set_device", "cudaSetDevice", 0);
  EXPECT_EQ(r[0]["device"], 0);
  EXPECT_EQ(r[0]["library"], e.library);
  EXPECT_GT(r[0]["cgroup_id"].get<uint64_t>(), 0u);
  EXPECT_GE(r[0]["ts_ns"].get<uint64_t>(), r[0]["entry_ns"].get<uint64_t>());
  // cudaMalloc calls the driver's cuMemAlloc_v2: one record, the runtime's.
  expect(1, "alloc", "cudaMalloc", 0);
  EXPECT_EQ(r[1]["bytes"], 1024);
  EXPECT_EQ(r[1]["ptr"], 0x7000000 + 1024);
  expect(2, "alloc", "cudaMalloc", 2);
  EXPECT_EQ(r[2]["bytes"], uint64_t{1} << 40);
  EXPECT_EQ(r[2]["ptr"], 0);
  expect(3, "alloc", "cudaMallocPitch", 0);
  EXPECT_EQ(r[3]["bytes"], 1280);
  EXPECT_EQ(r[3]["ptr"], 0x7000000 + 1280);
  expect(4, "stream_create", "cudaStreamCreateWithFlags", 0);
  EXPECT_EQ(r[4]["stream"], 0x5001);
  EXPECT_EQ(r[4]["stream_flags"], 1);
  // cudaLaunchKernel -> cuLaunchKernel: one record, the runtime's.
  expect_launch(5, "cudaLaunchKernel", 0, e.library);
  EXPECT_EQ(r[5]["function"], 0x1234);
  EXPECT_EQ(r[5]["grid"], json::array({2, 3, 4}));
  EXPECT_EQ(r[5]["block"], json::array({32, 1, 1}));
  EXPECT_EQ(r[5]["shared_bytes"], 128);
  EXPECT_EQ(r[5]["stream"], 0x5001);
  // __cudaLaunchKernel jumps to cudaLaunchKernel, which calls cuLaunchKernel: one record.
  expect_launch(6, "__cudaLaunchKernel", 0, e.library);
  EXPECT_EQ(r[6]["function"], 0x999);
  EXPECT_EQ(r[6]["grid"], json::array({1, 1, 1}));
  EXPECT_EQ(r[6]["block"], json::array({64, 2, 1}));
  EXPECT_EQ(r[6]["shared_bytes"], 0);
  EXPECT_EQ(r[6]["stream"], 0);
  // __cudaLaunchKernel_ptsz calls cudaLaunchKernel_ptsz, and so on to the driver: one record.
  expect_launch(7, "__cudaLaunchKernel_ptsz", 0, e.library);
  EXPECT_EQ(r[7]["function"], 0x998);
  EXPECT_EQ(r[7]["block"], json::array({64, 2, 1}));
  // A launch that fails: a failure with launch results, a launch counted at entry without.
  expect_launch(8, "cudaLaunchKernel", 1, e.library);
  EXPECT_EQ(r[8]["function"], 0x1235);
  EXPECT_EQ(r[8]["block"], json::array({0, 1, 1}));
  // From a deeper frame, over stack the earlier launches left untouched: counted.
  expect_launch(9, "cudaLaunchKernel", 0, e.library);
  EXPECT_EQ(r[9]["function"], 0x1236);
  EXPECT_EQ(r[9]["grid"], json::array({3, 1, 1}));
  size_t i = 10;
  if (e.driver_probed) {
    // The program's own cuLaunchKernel, after runtime launches from the same frame: counted.
    expect_launch(i, "cuLaunchKernel", 0, "driver");
    EXPECT_EQ(r[i]["function"], 0x4242);
    EXPECT_EQ(r[i]["grid"], json::array({5, 1, 1}));
    EXPECT_EQ(r[i]["block"], json::array({128, 1, 1}));
    EXPECT_EQ(r[i]["stream"], 0x5001);
    ++i;
  }
  expect(i, "copy", "cudaMemcpy", 0);
  EXPECT_EQ(r[i]["dst"], 0x10);
  EXPECT_EQ(r[i]["src"], 0x20);
  EXPECT_EQ(r[i]["bytes"], 4096);
  EXPECT_EQ(r[i]["copy_kind"], 1);
  EXPECT_EQ(r[i]["async"], 0);
  EXPECT_LE(r[i]["entry_ns"].get<uint64_t>(), r[i]["ts_ns"].get<uint64_t>());
  ++i;
  expect(i, "sync", "cudaStreamSynchronize", 0);
  EXPECT_EQ(r[i]["object"], 0x5001);
  ++i;
  expect(i, "free", "cudaFree", 4);
  EXPECT_EQ(r[i]["ptr"], 0xdead);
  ++i;
  expect(i, "free", "cudaFree", 0);
  EXPECT_EQ(r[i]["ptr"], 0x7000000 + 1024);
  ++i;
  EXPECT_EQ(r[i]["kind"], "exit");
  EXPECT_EQ(r[i]["rc"], 7);
}

TEST_F(TracerBpfTest, ExactRecordsOfAProgramStartedAfterTheTracer) {
  CollectingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(TestOptions(), &sink);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  TracerHealth before = (*tracer)->Health();
  EXPECT_TRUE(before.enabled);
  // libcudart.so and libcudart.so.13 are one inode: probed once, like libcuda.so.1.
  EXPECT_EQ(FakeLibraries(before), 2u) << json(before.libraries).dump();

  pid_t a = Spawn({FLYT_TRACE_FAKE_APP, "run"});
  pid_t b = Spawn({FLYT_TRACE_FAKE_APP, "run"});
  EXPECT_EQ(Wait(a), 7);
  EXPECT_EQ(Wait(b), 7);
  ASSERT_TRUE(Eventually([&] { return sink.SawExit(a) && sink.SawExit(b); }));
  ExpectRunRecords(sink.CallsOf(a));
  ExpectRunRecords(sink.CallsOf(b));
  for (const auto& [pid, lib] : sink.Late()) {
    EXPECT_NE(pid, static_cast<uint32_t>(a)) << lib;
    EXPECT_NE(pid, static_cast<uint32_t>(b)) << lib;
  }

  TracerHealth after = (*tracer)->Health();
  EXPECT_EQ(FakeLibraries(after), 2u);  // two processes, the same files: no new probes
  EXPECT_GE(after.events_received, 24u);
  EXPECT_EQ(after.events_lost, 0u);
  EXPECT_TRUE(after.attach_failures.empty()) << json(after.attach_failures).dump();
  (*tracer)->Stop();
  // Stopped, it still says what it probed and what it received (flyt-trace reports it then).
  TracerHealth stopped = (*tracer)->Health();
  EXPECT_FALSE(stopped.enabled);
  EXPECT_EQ(stopped.libraries_probed, after.libraries_probed);
  EXPECT_EQ(FakeLibraries(stopped), 2u) << json(stopped.libraries).dump();
  EXPECT_GE(stopped.events_received, after.events_received);
  EXPECT_GE(stopped.events_lost, after.events_lost);  // tracing is system-wide: others may flood
}

TEST_F(TracerBpfTest, AProcessStartedBeforeTheTracerIsFoundByTheProcScan) {
  std::string go = "/tmp/flyt-trace-go-" + std::to_string(::getpid());
  std::filesystem::remove(go);
  pid_t early = Spawn({FLYT_TRACE_FAKE_APP, "wait", go});
  // Its libraries are mapped once it runs main.
  ASSERT_TRUE(Eventually([&] {
    std::ifstream maps("/proc/" + std::to_string(early) + "/maps");
    std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
    return text.find("libcudart.so.13") != std::string::npos;
  }));
  TraceOptions options = TestOptions();
  options.library_dirs.clear();  // only the /proc scan can find the fake runtime
  CollectingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(options, &sink);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  bool late = false;
  for (const auto& [pid, lib] : sink.Late()) {
    if (pid == static_cast<uint32_t>(early) && lib.find("libcudart.so.13") != std::string::npos) {
      late = true;
    }
  }
  EXPECT_TRUE(late);
  EXPECT_EQ(FakeLibraries((*tracer)->Health()), 2u);
  std::ofstream(go) << "go";
  EXPECT_EQ(Wait(early), 7);
  ASSERT_TRUE(Eventually([&] { return sink.SawExit(early); }));
  ExpectRunRecords(sink.CallsOf(early));
  std::filesystem::remove(go);
}

// A static program's file is probed once its exec is read. Runs `path driver` (gone, maybe, before
// it is examined: that must not keep the file from being probed), waits until the file whose name
// holds `name` is probed, then runs `path run`, traced from its first call: its pid once its exit
// is seen, -1 (reported) otherwise.
pid_t RunAfterItsExecIsProbed(Tracer& tracer, CollectingSink& sink, const char* path,
                              const std::string& name) {
  pid_t first = Spawn({path, "driver"});
  EXPECT_EQ(Wait(first), 0);
  bool probed = Eventually([&] {
    for (const std::string& lib : tracer.Health().libraries) {
      if (lib.find(name) != std::string::npos) return true;
    }
    return false;
  });
  EXPECT_TRUE(probed) << name << " was not probed";
  if (!probed) return -1;
  pid_t second = Spawn({path, "run"});
  EXPECT_EQ(Wait(second), 7);
  bool exited = Eventually([&] { return sink.SawExit(second); });
  EXPECT_TRUE(exited) << "no exit of " << second;
  return exited ? second : -1;
}

TEST_F(TracerBpfTest, AStaticProgramIsProbedFromItsExecAndItsNextRunIsTracedFromItsFirstCall) {
  CollectingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(TestOptions(), &sink);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  pid_t second = RunAfterItsExecIsProbed(**tracer, sink, FLYT_TRACE_FAKE_STATIC,
                                         "trace_fake_static");
  ASSERT_GT(second, 0);
  ExpectRunRecords(sink.CallsOf(second), {.library = "static_runtime", .driver_probed = false});
  for (const auto& [pid, lib] : sink.Late()) EXPECT_NE(pid, static_cast<uint32_t>(second)) << lib;

  // Its stripped copy cannot be probed: reported with its pid, though it is gone when examined.
  pid_t stripped = Spawn({FLYT_TRACE_FAKE_STRIPPED, "run"});
  EXPECT_EQ(Wait(stripped), 7);
  bool reported = Eventually([&] {
    for (const UnprobeableProcess& u : (*tracer)->Health().unprobeable) {
      if (u.pid == static_cast<uint32_t>(stripped)) {
        EXPECT_NE(u.executable.find("trace_fake_static_stripped"), std::string::npos);
        EXPECT_NE(u.reason.find("stripped"), std::string::npos) << u.reason;
        return true;
      }
    }
    return false;
  });
  EXPECT_TRUE(reported);
}

TEST_F(TracerBpfTest, WithLaunchResultsAFailedLaunchIsItsReturnCode) {
  TraceOptions options = TestOptions();
  options.launch_results = true;
  CollectingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(options, &sink);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  pid_t p = Spawn({FLYT_TRACE_FAKE_APP, "run"});
  EXPECT_EQ(Wait(p), 7);
  ASSERT_TRUE(Eventually([&] { return sink.SawExit(p); }));
  ExpectRunRecords(sink.CallsOf(p), {.launch_results = true});
  EXPECT_TRUE((*tracer)->Health().attach_failures.empty());
}

// A runtime compiled into the executable shares its code range with the program: its own driver
// calls are told apart from the program's by the launch's frame still being in place.
TEST_F(TracerBpfTest, AStaticRuntimeOverALibcudaCountsEachLaunchOnce) {
  for (bool launch_results : {false, true}) {
    SCOPED_TRACE(launch_results ? "launch results" : "launches at entry");
    TraceOptions options = TestOptions();
    options.launch_results = launch_results;
    CollectingSink sink;
    Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(options, &sink);
    ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
    pid_t second = RunAfterItsExecIsProbed(**tracer, sink, FLYT_TRACE_FAKE_STATIC_RT,
                                           "trace_fake_static_rt");
    ASSERT_GT(second, 0);
    ExpectRunRecords(sink.CallsOf(second),
                     {.library = "static_runtime", .launch_results = launch_results});
  }
}

// Another tracer's return probes on the same launches (here one with launch results: a uretprobe
// on every launch) put the kernel's trampoline where the return addresses were: after a tail jump
// the callee finds it there. Launches are still told apart by the real return addresses, for
// both tracers, with the runtime a library and compiled in.
TEST_F(TracerBpfTest, TwoTracersOneWithLaunchResultsBothCountEachLaunchOnce) {
  TraceOptions with_results = TestOptions();
  with_results.launch_results = true;
  CollectingSink a;
  CollectingSink b;
  Result<std::unique_ptr<Tracer>> ta = Tracer::Start(with_results, &a);
  ASSERT_TRUE(ta.ok()) << ta.status().ToString();
  Result<std::unique_ptr<Tracer>> tb = Tracer::Start(TestOptions(), &b);
  ASSERT_TRUE(tb.ok()) << tb.status().ToString();
  pid_t p = Spawn({FLYT_TRACE_FAKE_APP, "run"});
  EXPECT_EQ(Wait(p), 7);
  ASSERT_TRUE(Eventually([&] { return a.SawExit(p) && b.SawExit(p); }));
  ExpectRunRecords(a.CallsOf(p), {.launch_results = true});
  ExpectRunRecords(b.CallsOf(p));

  // The static runtime: both tracers probe the executable from its first exec.
  pid_t first = Spawn({FLYT_TRACE_FAKE_STATIC_RT, "driver"});
  EXPECT_EQ(Wait(first), 0);
  auto probed = [](Tracer& t) {
    for (const std::string& lib : t.Health().libraries) {
      if (lib.find("trace_fake_static_rt") != std::string::npos) return true;
    }
    return false;
  };
  ASSERT_TRUE(Eventually([&] { return probed(**ta) && probed(**tb); }));
  pid_t s = Spawn({FLYT_TRACE_FAKE_STATIC_RT, "run"});
  EXPECT_EQ(Wait(s), 7);
  ASSERT_TRUE(Eventually([&] { return a.SawExit(s) && b.SawExit(s); }));
  ExpectRunRecords(a.CallsOf(s), {.library = "static_runtime", .launch_results = true});
  ExpectRunRecords(b.CallsOf(s), {.library = "static_runtime"});
}

TEST_F(TracerBpfTest, DriverApiStreamsAreRecordedWithTheirFlags) {
  CollectingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(TestOptions(), &sink);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  pid_t p = Spawn({FLYT_TRACE_FAKE_APP, "driver"});
  EXPECT_EQ(Wait(p), 0);
  ASSERT_TRUE(Eventually([&] { return sink.SawExit(p); }));
  std::vector<json> r = sink.CallsOf(p);
  ASSERT_EQ(r.size(), 4u) << json(r).dump(1);
  EXPECT_EQ(r[0]["kind"], "stream_create");
  EXPECT_EQ(r[0]["func"], "cuStreamCreate");
  EXPECT_EQ(r[0]["library"], "driver");
  EXPECT_EQ(r[0]["stream"], 0x5001);
  EXPECT_EQ(r[0]["stream_flags"], 1);  // CU_STREAM_NON_BLOCKING
  EXPECT_EQ(r[1]["kind"], "stream_create");
  EXPECT_EQ(r[1]["func"], "cuStreamCreateWithPriority");
  EXPECT_EQ(r[1]["stream"], 0x5100);
  EXPECT_EQ(r[1]["stream_flags"], 0);
  EXPECT_EQ(r[1]["priority"], -2);
  EXPECT_EQ(r[2]["kind"], "stream_destroy");
  EXPECT_EQ(r[2]["func"], "cuStreamDestroy_v2");
  EXPECT_EQ(r[2]["stream"], 0x5001);
  EXPECT_EQ(r[2]["rc"], 0);
  EXPECT_EQ(r[3]["kind"], "exit");
}

TEST_F(TracerBpfTest, OnlyLibraryOpensThatSucceedAreReported) {
  CollectingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(TestOptions(), &sink);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  // As the loader tries folders: one that fails, then the one that holds it.
  const std::string missing = "/nonexistent-flyt-test/glibc-hwcaps/libcuda.so.1";
  const std::string present = std::string(FLYT_TRACE_FAKE_DIR) + "/libcuda.so.1";
  EXPECT_LT(::open(missing.c_str(), O_RDONLY | O_CLOEXEC), 0);
  int fd = ::open(present.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::close(fd);
  // (This process is the tracer too: its own opens of the libraries it probes are there as well.)
  uint32_t self = static_cast<uint32_t>(::getpid());
  auto has = [&](const std::string& path) {
    std::vector<std::string> opens = sink.OpensOf(self);
    return std::find(opens.begin(), opens.end(), path) != opens.end();
  };
  ASSERT_TRUE(Eventually([&] { return has(present); }));
  EXPECT_FALSE(has(missing));
}

// Tracing is system-wide: other tests' programs may fill this tiny ring too, so what holds whatever
// else runs is asserted — every record of the loop is either delivered or counted lost, and the
// ring cannot have delivered them all.
TEST_F(TracerBpfTest, AnOverflowingRingCountsLostEvents) {
  TraceOptions options = TestOptions();
  options.ring_buffer_bytes = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  options.drain_interval_ms = 3000;
  options.high_water_percent = 100;  // no early wakeup: the ring must overflow
  CollectingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(options, &sink);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  TracerHealth before = (*tracer)->Health();
  constexpr uint64_t kCalls = 5000;
  pid_t p = Spawn({FLYT_TRACE_FAKE_APP, "loop", std::to_string(kCalls)});
  EXPECT_EQ(Wait(p), 0);
  auto accounted = [&] {
    TracerHealth h = (*tracer)->Health();
    return h.events_received + h.events_lost - before.events_received - before.events_lost;
  };
  // The loop's records (and its exit), delivered or lost, once the next drain has run.
  EXPECT_TRUE(Eventually([&] { return accounted() >= kCalls; }));
  TracerHealth h = (*tracer)->Health();
  EXPECT_GT(h.events_lost, before.events_lost);
  size_t syncs = 0;
  for (const json& j : sink.CallsOf(p)) syncs += j["kind"] == "sync";
  EXPECT_LT(syncs, kCalls);
}

// The environment of a program whose records are drained only after it is gone (reaped: no
// /proc/<pid> left to read) comes from the ENVIRON record written while it opened the runtime.
TEST_F(TracerBpfTest, AProgramGoneBeforeItsRecordsAreDrainedKeepsItsEnvironment) {
  HoldingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(TestOptions(), &sink);
  ASSERT_TRUE(tracer.ok()) << tracer.status().ToString();
  pid_t p = Spawn({FLYT_TRACE_FAKE_APP, "run"},
                  {"CUDA_VISIBLE_DEVICES=1", "FLYT_SERVER=127.0.0.1:9"});
  EXPECT_EQ(Wait(p), 7);
  ASSERT_TRUE(Eventually([&] { return sink.SawExit(p); }));
  ASSERT_FALSE(std::filesystem::exists("/proc/" + std::to_string(p)));
  bool captured = false;
  for (const json& j : sink.RecordsOf(p)) {
    if (j["kind"] != "environ") continue;
    captured = true;
    EXPECT_EQ(j["environment"]["FLYT_SERVER"], "127.0.0.1:9") << j.dump();
    EXPECT_EQ(j["environment"]["CUDA_VISIBLE_DEVICES"], "1") << j.dump();
    EXPECT_EQ(j["flags"].get<int>() & FLYT_F_TRUNCATED, 0) << j.dump();
  }
  EXPECT_TRUE(captured) << json(sink.RecordsOf(p)).dump(1);

  // Device 0 of a program that sees only GPU 1 (fastest first: b, a) is GPU a; with no
  // environment it would be b.
  Aggregator agg(TestOptions());
  GpuIdentity a;
  a.index = 0;
  a.uuid = "GPU-aaaa";
  a.cores = 2048;
  GpuIdentity b;
  b.index = 1;
  b.uuid = "GPU-bbbb";
  b.cores = 8192;
  agg.SetGpus({a, b});
  sink.HandOn(agg);
  bool found = false;
  for (const ProcessCuda& pc : agg.Processes()) {
    if (pc.pid != static_cast<uint32_t>(p) || pc.device != 0) continue;
    found = true;
    EXPECT_EQ(pc.gpu_uuid, "GPU-aaaa");
    EXPECT_EQ(pc.comm, "trace_fake_app");
  }
  EXPECT_TRUE(found);
}

TEST(TracerOptions, ABadRingSizeIsRefused) {
  if (!Tracer::CheckSupport().ok()) GTEST_SKIP() << Tracer::CheckSupport().message();
  TraceOptions options = TestOptions();
  options.ring_buffer_bytes = 12345;
  CollectingSink sink;
  Result<std::unique_ptr<Tracer>> tracer = Tracer::Start(options, &sink);
  ASSERT_FALSE(tracer.ok());
  EXPECT_NE(tracer.status().message().find("power of two"), std::string::npos);
}

}  // namespace
}  // namespace flyt::trace
