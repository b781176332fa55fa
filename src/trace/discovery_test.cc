// Discovery without BPF: a file it examines that turns out not to be probeable needs no probe,
// so an Attacher without programs is enough to check how processes and executables are found.
#include "trace/discovery.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace flyt::trace {
namespace {

class NullSink : public RecordSink {
 public:
  void OnRecord(const void*, size_t) override {}
  void OnAttachedLate(uint32_t pid, const std::string& library) override {
    late.emplace_back(pid, library);
  }
  void OnDrainEnd() override {}
  std::vector<std::pair<uint32_t, std::string>> late;
};

flyt_trace_path ExecRecord(uint32_t pid, const std::string& path) {
  flyt_trace_path r;
  std::memset(&r, 0, sizeof(r));
  r.h.kind = FLYT_EV_EXEC;
  r.h.pid = r.h.tid = pid;
  std::strncpy(r.path, path.c_str(), sizeof(r.path) - 1);
  return r;
}

// A pid no process has (above pid_max's ceiling of 2^22).
constexpr uint32_t kGonePid = 4000000000u;

TEST(Discovery, AStrippedStaticProgramThatIsAlreadyGoneIsReportedFromItsExecPath) {
  TraceOptions options;
  options.library_dirs.clear();
  options.ld_so_conf.clear();
  Attacher attacher(AttachPrograms{});
  NullSink sink;
  Discovery discovery(options, &attacher, &sink);
  flyt_trace_path r = ExecRecord(kGonePid, FLYT_TRACE_FAKE_STRIPPED);
  discovery.OnControlRecord(&r, sizeof(r));
  ASSERT_EQ(discovery.unprobeable().size(), 1u);
  const UnprobeableProcess& u = discovery.unprobeable().front();
  EXPECT_EQ(u.pid, kGonePid);
  EXPECT_EQ(u.executable, FLYT_TRACE_FAKE_STRIPPED);
  EXPECT_NE(u.reason.find("stripped static binary"), std::string::npos) << u.reason;
  EXPECT_TRUE(sink.late.empty());

  // Its next run (another pid) is reported too, though the file was examined before.
  r = ExecRecord(kGonePid + 1, FLYT_TRACE_FAKE_STRIPPED);
  discovery.OnControlRecord(&r, sizeof(r));
  ASSERT_EQ(discovery.unprobeable().size(), 2u);
  EXPECT_EQ(discovery.unprobeable().back().pid, kGonePid + 1);
}

TEST(Discovery, AnExecWhoseFileIsGoneToo) {
  TraceOptions options;
  Attacher attacher(AttachPrograms{});
  NullSink sink;
  Discovery discovery(options, &attacher, &sink);
  flyt_trace_path r = ExecRecord(kGonePid, "/nonexistent/flyt-trace-test-program");
  discovery.OnControlRecord(&r, sizeof(r));
  EXPECT_TRUE(discovery.unprobeable().empty());
  EXPECT_TRUE(sink.late.empty());
  EXPECT_TRUE(attacher.stats().attach_failures.empty());
}

}  // namespace
TEST(Discovery, TheLoadersConfigurationNamesItsDirectoriesThroughItsIncludes) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("flyt-ldconf-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "ld.so.conf.d");
  std::ofstream(dir / "ld.so.conf") << "# comment\ninclude ld.so.conf.d/*.conf\n"
                                       "/usr/local/lib   # trailing comment\n"
                                       "hwcap 0 nosegneg\n";
  std::ofstream(dir / "ld.so.conf.d" / "a-cuda.conf")
      << "/usr/local/cuda-13.0/targets/x86_64-linux/lib\n";
  std::ofstream(dir / "ld.so.conf.d" / "b-nvidia.conf")
      << "  /usr/local/nvidia/lib64 /usr/local/nvidia/lib\n/usr/local/lib\n"
         "include " << (dir / "ld.so.conf").string() << "\n";  // a loop ends at depth 8
  std::ofstream(dir / "ld.so.conf.d" / "c-old.conf") << "/opt/old=libc6\n";
  EXPECT_EQ(LoaderConfigDirs((dir / "ld.so.conf").string()),
            (std::vector<std::string>{"/usr/local/cuda-13.0/targets/x86_64-linux/lib",
                                      "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib",
                                      "/usr/local/lib", "/opt/old"}));
  EXPECT_TRUE(LoaderConfigDirs((dir / "missing.conf").string()).empty());
  fs::remove_all(dir);
}

}  // namespace flyt::trace
