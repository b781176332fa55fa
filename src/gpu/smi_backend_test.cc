// Tests of the nvidia-smi fallback as a backend: the queries it runs, fields an old driver
// rejects, nvidia-smi failing, timing out or losing a GPU, and a fake nvidia-smi script. The CSV
// parsers' cases are smi_parse_test.cc.
#include "gpu/smi_backend.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/strings.h"

#include "gpu/smi_testing.h"

namespace flyt::gpu {
namespace {

using smi_test::DataDir;
using smi_test::FieldsWithout;
using smi_test::kMiB;
using smi_test::ReadData;

// The fields an argv asks for, from its "--query-gpu=" / "--query-compute-apps=" argument.
std::set<std::string> AskedFields(const std::vector<std::string>& argv) {
  std::set<std::string> fields;
  for (const std::string& arg : argv) {
    size_t eq = arg.find('=');
    if (!StartsWith(arg, "--query-") || eq == std::string::npos) continue;
    for (std::string_view f : Split(std::string_view(arg).substr(eq + 1), ',')) {
      fields.emplace(f);
    }
  }
  return fields;
}

bool IsGpuQuery(const std::vector<std::string>& argv) {
  return argv.size() > 1 && StartsWith(argv[1], "--query-gpu=");
}

// A directory removed with everything in it when the test ends, pass or fail.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "flyt-smi-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  void Write(const std::string& relative, const std::string& content) const {
    std::filesystem::path file = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << content;
  }

 private:
  std::string path_;
};

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Plays nvidia-smi inside the test process: answers each query from fixed text and records every
// argv it was given.
struct FakeSmi {
  CommandOutput gpus;
  CommandOutput apps;
  std::set<std::string> rejected_fields;
  std::optional<Status> apps_error;  // the runner itself fails for the apps query
  std::vector<std::vector<std::string>> calls;

  CommandRunner Runner() {
    return [this](const std::vector<std::string>& argv) -> Result<CommandOutput> {
      calls.push_back(argv);
      for (const std::string& field : AskedFields(argv)) {
        if (rejected_fields.count(field) != 0) {
          CommandOutput out;
          out.exit_code = 2;
          out.stdout_text = "Field \"" + field + "\" is not a valid field to query.\n\n";
          return out;
        }
      }
      if (IsGpuQuery(argv)) return gpus;
      if (apps_error) return *apps_error;
      return apps;
    };
  }

  static FakeSmi FromScenario(const std::string& scenario) {
    FakeSmi fake;
    fake.gpus.stdout_text = ReadData(scenario + "/gpus.csv");
    fake.apps.stdout_text = ReadData(scenario + "/apps.csv");
    return fake;
  }
};

TEST(SmiBackendTest, OneGpuQueryAndOneAppsQueryPerSnapshot) {
  TempDir proc;
  ASSERT_FALSE(proc.path().empty());
  // /proc for the rank-0 trainer; the other processes are "gone" and keep nvidia-smi's names.
  proc.Write("48211/comm", "python3\n");
  static const char kCmdline[] =
      "python3\0train.py\0--rank\0"
      "0";  // NUL-separated, NUL-ended
  proc.Write("48211/cmdline", std::string(kCmdline, sizeof(kCmdline)));
  proc.Write("48211/cgroup",
             "0::/system.slice/docker-"
             "4f1c2a7b9d0e3f5a6b8c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a.scope\n");

  FakeSmi fake = FakeSmi::FromScenario("h100x8");
  SmiOptions options;
  options.program = "/opt/nvidia/bin/nvidia-smi";
  options.proc_root = proc.path();
  std::unique_ptr<Backend> backend = MakeSmiBackend(options, fake.Runner());
  EXPECT_EQ(backend->source(), Source::kNvidiaSmi);

  auto before = std::chrono::system_clock::now();
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_GE(snapshot->taken_at, before);
  EXPECT_EQ(snapshot->source, Source::kNvidiaSmi);
  EXPECT_EQ(snapshot->reason, "");
  EXPECT_EQ(snapshot->driver_version, "570.133.20");
  ASSERT_EQ(snapshot->gpus.size(), 8u);

  ASSERT_EQ(fake.calls.size(), 2u);
  const std::vector<std::string>& gpu_call = fake.calls[0];
  ASSERT_EQ(gpu_call.size(), 3u);
  EXPECT_EQ(gpu_call[0], "/opt/nvidia/bin/nvidia-smi");
  std::string all_fields;
  for (const std::string& f : SmiGpuFields()) all_fields += (all_fields.empty() ? "" : ",") + f;
  EXPECT_EQ(gpu_call[1], "--query-gpu=" + all_fields);
  EXPECT_EQ(gpu_call[2], "--format=csv,noheader,nounits");
  EXPECT_EQ(fake.calls[1],
            (std::vector<std::string>{"/opt/nvidia/bin/nvidia-smi",
                                      "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                                      "--format=csv,noheader,nounits"}));

  // Processes land on the GPU whose uuid nvidia-smi named.
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(snapshot->gpus[i].processes.size(), 1u) << i;
    EXPECT_EQ(snapshot->gpus[i].processes[0].pid, 48211u + i);
  }
  EXPECT_TRUE(snapshot->gpus[6].processes.empty());
  ASSERT_EQ(snapshot->gpus[7].processes.size(), 2u);

  const ProcessInfo& rank0 = snapshot->gpus[0].processes[0];
  EXPECT_EQ(rank0.type, ProcessType::kCompute);
  EXPECT_EQ(rank0.name, "python3");
  EXPECT_EQ(rank0.command, "python3 train.py --rank 0");  // /proc wins over nvidia-smi
  EXPECT_TRUE(rank0.user.has_value());
  EXPECT_EQ(rank0.container_id, "4f1c2a7b9d0e3f5a6b8c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a");
  EXPECT_EQ(rank0.used_memory_bytes, 72418 * kMiB);

  const ProcessInfo& render = snapshot->gpus[7].processes[1];
  EXPECT_EQ(render.pid, 52210u);
  EXPECT_EQ(render.name, "render worker");  // no /proc entry: nvidia-smi's name stands
  EXPECT_EQ(render.command, "/opt/Render Farm, Inc/bin/render worker");
  EXPECT_EQ(render.user, std::nullopt);

  ASSERT_TRUE(backend->Snapshot().ok());
  ASSERT_TRUE(backend->Snapshot().ok());
  EXPECT_EQ(fake.calls.size(), 6u);
}

TEST(SmiBackendTest, RejectedFieldIsDroppedOnceAndForAll) {
  std::vector<std::vector<std::string>> calls;
  const std::string field_error = ReadData("v100-t4-r470/field-error.txt");
  const std::string gpus_csv = ReadData("v100-t4-r470/gpus.csv");
  const std::string apps_csv = ReadData("v100-t4-r470/apps.csv");
  CommandRunner runner = [&](const std::vector<std::string>& argv) -> Result<CommandOutput> {
    calls.push_back(argv);
    CommandOutput out;
    if (AskedFields(argv).count("memory.reserved") != 0) {
      out.exit_code = 2;
      out.stdout_text = field_error;
    } else {
      out.stdout_text = IsGpuQuery(argv) ? gpus_csv : apps_csv;
    }
    return out;
  };
  TempDir no_proc;
  SmiOptions options;
  options.proc_root = no_proc.path();
  SmiBackend backend(options, runner);

  Result<GpuSnapshot> first = backend.Snapshot();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->reason, "");
  EXPECT_EQ(first->driver_version, "470.256.02");
  ASSERT_EQ(first->gpus.size(), 4u);
  EXPECT_EQ(first->gpus[0].memory_reserved_bytes, std::nullopt);
  EXPECT_EQ(first->gpus[0].memory_used_bytes, 30211 * kMiB);
  ASSERT_EQ(first->gpus[0].processes.size(), 1u);
  EXPECT_EQ(first->gpus[0].processes[0].pid, 7730u);
  ASSERT_EQ(first->gpus[3].processes.size(), 1u);
  EXPECT_EQ(first->gpus[3].processes[0].name, "ffmpeg");

  ASSERT_EQ(calls.size(), 3u);  // rejected, retried, apps
  EXPECT_EQ(AskedFields(calls[0]).count("memory.reserved"), 1u);
  EXPECT_TRUE(IsGpuQuery(calls[1]));
  EXPECT_EQ(AskedFields(calls[1]).count("memory.reserved"), 0u);
  EXPECT_EQ(AskedFields(calls[1]).size(), SmiGpuFields().size() - 1);
  EXPECT_EQ(backend.gpu_fields(), FieldsWithout("memory.reserved"));

  Result<GpuSnapshot> second = backend.Snapshot();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_EQ(calls.size(), 5u);  // no second rejection
  EXPECT_EQ(AskedFields(calls[3]).count("memory.reserved"), 0u);
  EXPECT_EQ(second->gpus.size(), 4u);
}

TEST(SmiBackendTest, SeveralRejectedFieldsAreDroppedOneByOne) {
  FakeSmi fake;
  fake.rejected_fields = {"memory.reserved", "clocks.max.mem",
                          "ecc.errors.corrected.aggregate.total"};
  // One GPU, answered in the 23 columns that remain once the three are gone.
  fake.gpus.stdout_text = "0, GPU-0d3e0f52-0d1a-4a7c-9d3b-0a51f1c5d2e1";
  for (int i = 0; i < 21; ++i) fake.gpus.stdout_text += ", [N/A]";
  fake.gpus.stdout_text += "\n";
  SmiBackend backend(SmiOptions{}, fake.Runner());

  Result<GpuSnapshot> snapshot = backend.Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(snapshot->reason, "");
  ASSERT_EQ(snapshot->gpus.size(), 1u);
  EXPECT_EQ(snapshot->gpus[0].uuid, "GPU-0d3e0f52-0d1a-4a7c-9d3b-0a51f1c5d2e1");
  ASSERT_EQ(fake.calls.size(), 5u);  // three rejections, the answered query, the apps query
  EXPECT_EQ(backend.gpu_fields().size(), SmiGpuFields().size() - 3);
  for (const std::string& gone : fake.rejected_fields) {
    EXPECT_EQ(AskedFields(fake.calls[3]).count(gone), 0u) << gone;
  }
}

TEST(SmiBackendTest, RejectingAFieldFlytNeedsIsAnError) {
  FakeSmi fake;
  fake.rejected_fields = {"uuid"};
  SmiBackend backend(SmiOptions{}, fake.Runner());
  Result<GpuSnapshot> snapshot = backend.Snapshot();
  ASSERT_FALSE(snapshot.ok());
  EXPECT_NE(snapshot.status().message().find("\"uuid\""), std::string::npos)
      << snapshot.status().ToString();
  EXPECT_EQ(fake.calls.size(), 1u);
}

TEST(SmiBackendTest, FailingNvidiaSmiIsAnErrorCarryingItsMessage) {
  FakeSmi fake;
  fake.gpus.exit_code = 9;
  fake.gpus.stdout_text = ReadData("no-driver/fail");
  std::unique_ptr<Backend> backend = MakeSmiBackend(SmiOptions{}, fake.Runner());
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(snapshot.status().message().find(
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
            std::string::npos)
      << snapshot.status().ToString();
  EXPECT_NE(snapshot.status().message().find("exit status 9"), std::string::npos);
  EXPECT_EQ(fake.calls.size(), 1u);  // no process query after a failed GPU query
}

TEST(SmiBackendTest, StderrLineIsPreferredInTheError) {
  FakeSmi fake;
  fake.gpus.exit_code = 6;
  fake.gpus.stderr_text = "\nNo devices were found\n";
  std::unique_ptr<Backend> backend = MakeSmiBackend(SmiOptions{}, fake.Runner());
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().message(),
            "nvidia-smi --query-gpu failed (exit status 6): No devices were found");
}

TEST(SmiBackendTest, NvidiaSmiThatCannotRunIsAnError) {
  CommandRunner runner = [](const std::vector<std::string>&) -> Result<CommandOutput> {
    return NotFound("nvidia-smi: not found on PATH");
  };
  std::unique_ptr<Backend> backend = MakeSmiBackend(SmiOptions{}, runner);
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(snapshot.status().message(), "nvidia-smi --query-gpu: nvidia-smi: not found on PATH");
}

TEST(SmiBackendTest, EmptyGpuOutputIsAnError) {
  FakeSmi fake;  // exit 0, nothing printed
  std::unique_ptr<Backend> backend = MakeSmiBackend(SmiOptions{}, fake.Runner());
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().message(), "nvidia-smi --query-gpu listed no GPUs");
}

TEST(SmiBackendTest, FailedProcessQueryLeavesTheGpusStanding) {
  FakeSmi fake = FakeSmi::FromScenario("rtx4090");
  fake.apps.exit_code = 4;
  fake.apps.stdout_text = "Failed to initialize NVML: Insufficient Permissions\n";
  TempDir no_proc;
  SmiOptions options;
  options.proc_root = no_proc.path();
  std::unique_ptr<Backend> backend = MakeSmiBackend(options, fake.Runner());
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_EQ(snapshot->gpus.size(), 1u);
  EXPECT_EQ(snapshot->gpus[0].fan_speed_percent, 42u);
  EXPECT_TRUE(snapshot->gpus[0].processes.empty());
  EXPECT_EQ(snapshot->reason,
            "process query failed, processes are not listed: nvidia-smi --query-compute-apps "
            "exited with status 4: Failed to initialize NVML: Insufficient Permissions");

  fake.apps_error =
      Status(StatusCode::kTimeout, "nvidia-smi did not finish within 10000 ms; killed");
  snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(snapshot->gpus.size(), 1u);
  EXPECT_NE(snapshot->reason.find("process query failed"), std::string::npos);
  EXPECT_NE(snapshot->reason.find("did not finish within 10000 ms"), std::string::npos)
      << snapshot->reason;
}

TEST(SmiBackendTest, MalformedRowsGoToReasonAndTheOtherGpusStay) {
  FakeSmi fake;
  fake.gpus.stdout_text = ReadData("malformed-garbage/gpus.csv");
  fake.apps.stdout_text = ReadData("h100x8/apps.csv");
  TempDir no_proc;
  SmiOptions options;
  options.proc_root = no_proc.path();
  std::unique_ptr<Backend> backend = MakeSmiBackend(options, fake.Runner());
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_EQ(snapshot->gpus.size(), 3u);
  EXPECT_EQ(snapshot->gpus[1].index, 2u);
  ASSERT_EQ(snapshot->gpus[1].processes.size(), 1u);
  EXPECT_EQ(snapshot->gpus[1].processes[0].pid, 48213u);
  // The dropped GPU's process, and those of GPUs this fixture does not have, are named too.
  EXPECT_NE(snapshot->reason.find(
                "nvidia-smi --query-gpu: line 2, column 7 (memory.used): \"72941 MiB\" is not a "
                "number"),
            std::string::npos)
      << snapshot->reason;
  EXPECT_NE(snapshot->reason.find("process 48212 is on GPU-5e264301-4466-05f3-1d49-ba0ad599266c, "
                                  "which the GPU query did not list"),
            std::string::npos)
      << snapshot->reason;
}

TEST(SmiBackendTest, LostGpuMakesNvidiaSmiFailButTheOthersStand) {
  FakeSmi fake = FakeSmi::FromScenario("gpu-lost");
  fake.gpus.exit_code = 15;
  TempDir no_proc;
  SmiOptions options;
  options.proc_root = no_proc.path();
  std::unique_ptr<Backend> backend = MakeSmiBackend(options, fake.Runner());
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_EQ(snapshot->gpus.size(), 3u);
  EXPECT_TRUE(snapshot->gpus[2].lost);
  EXPECT_EQ(snapshot->gpus[0].processes.size(), 1u);
  EXPECT_NE(snapshot->reason.find("nvidia-smi --query-gpu exited with status 15"),
            std::string::npos)
      << snapshot->reason;
  EXPECT_NE(snapshot->reason.find("Unable to determine the device handle for GPU 00000000:5D:00.0"),
            std::string::npos)
      << snapshot->reason;
}

// --- End to end: the real fake-nvidia-smi script, spawned by RunCommand -----------------------

class FakeSmiScriptTest : public ::testing::Test {
 protected:
  std::unique_ptr<SmiBackend> Backend(const std::string& scenario) {
    env_ = std::make_unique<ScopedEnv>("FLYT_FAKE_SMI_DIR", DataDir() + scenario);
    SmiOptions options;
    options.program = DataDir() + "fake-nvidia-smi";
    options.proc_root = no_proc_.path();  // the host's real PIDs must not leak into the result
    options.timeout = std::chrono::milliseconds(30000);
    return std::make_unique<SmiBackend>(options, CommandRunner{});
  }

  TempDir no_proc_;
  std::unique_ptr<ScopedEnv> env_;
};

TEST_F(FakeSmiScriptTest, H100Box) {
  auto backend = Backend("h100x8");
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(snapshot->reason, "");
  EXPECT_EQ(snapshot->driver_version, "570.133.20");
  ASSERT_EQ(snapshot->gpus.size(), 8u);
  EXPECT_EQ(snapshot->gpus[5].pci_bus_id, "00000000:AB:00.0");
  EXPECT_EQ(snapshot->gpus[5].power_draw_mw, 677480u);
  ASSERT_EQ(snapshot->gpus[7].processes.size(), 2u);
  EXPECT_EQ(snapshot->gpus[7].processes[1].name, "render worker");
}

TEST_F(FakeSmiScriptTest, OldDriverRejectsMemoryReserved) {
  auto backend = Backend("v100-t4-r470");
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(snapshot->reason, "");
  ASSERT_EQ(snapshot->gpus.size(), 4u);
  EXPECT_EQ(snapshot->gpus[2].name, "Tesla T4");
  EXPECT_EQ(snapshot->gpus[2].memory_reserved_bytes, std::nullopt);
  EXPECT_EQ(snapshot->gpus[3].processes.size(), 1u);
  EXPECT_EQ(backend->gpu_fields(), FieldsWithout("memory.reserved"));
  ASSERT_TRUE(backend->Snapshot().ok());
}

TEST_F(FakeSmiScriptTest, UnifiedMemory) {
  auto backend = Backend("gb10-unified");
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_EQ(snapshot->gpus.size(), 1u);
  EXPECT_EQ(snapshot->gpus[0].memory_total_bytes, std::nullopt);
  EXPECT_EQ(snapshot->gpus[0].gpu_util_percent, 96u);
  ASSERT_EQ(snapshot->gpus[0].processes.size(), 1u);
  EXPECT_EQ(snapshot->gpus[0].processes[0].used_memory_bytes, std::nullopt);
  EXPECT_EQ(snapshot->gpus[0].processes[0].name, "python3.12");
}

TEST_F(FakeSmiScriptTest, NoDriver) {
  auto backend = Backend("no-driver");
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().message(),
            "nvidia-smi --query-gpu failed (exit status 9): NVIDIA-SMI has failed because it "
            "couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver "
            "is installed and running.");
}

TEST_F(FakeSmiScriptTest, LostGpu) {
  auto backend = Backend("gpu-lost");
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_EQ(snapshot->gpus.size(), 3u);
  EXPECT_TRUE(snapshot->gpus[2].lost);
  EXPECT_NE(snapshot->reason.find("exited with status 15"), std::string::npos);
}

TEST_F(FakeSmiScriptTest, EmptyOutput) {
  auto backend = Backend("empty");
  Result<GpuSnapshot> snapshot = backend->Snapshot();
  ASSERT_FALSE(snapshot.ok());
  EXPECT_EQ(snapshot.status().message(), "nvidia-smi --query-gpu listed no GPUs");
}

}  // namespace
}  // namespace flyt::gpu
