// Tests of the nvidia-smi fallback. Over ~900 lines on purpose: one case per field and fault of
// nvidia-smi's CSV output (absent values, units, locales, timeouts, a lost GPU), each beside the
// recorded output it parses (tests/data/nvidia-smi).
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

namespace flyt::gpu {
namespace {

constexpr uint64_t kMiB = 1048576;

std::string DataDir() { return std::string(FLYT_SOURCE_DIR) + "/tests/data/nvidia-smi/"; }

std::string ReadData(const std::string& relative) {
  Result<std::string> text = ReadFile(DataDir() + relative);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

std::vector<std::string> FieldsWithout(const std::string& dropped) {
  std::vector<std::string> fields;
  for (const std::string& f : SmiGpuFields()) {
    if (f != dropped) fields.push_back(f);
  }
  return fields;
}

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

// --- ParseSmiGpuCsv on captured outputs -------------------------------------------------------

TEST(ParseSmiGpuCsvTest, EightH100s) {
  std::string problems;
  std::optional<std::string> driver;
  auto gpus = ParseSmiGpuCsv(ReadData("h100x8/gpus.csv"), SmiGpuFields(), &problems, &driver);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  EXPECT_EQ(driver, "570.133.20");
  ASSERT_EQ(gpus->size(), 8u);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ((*gpus)[i].index, i);
    EXPECT_EQ((*gpus)[i].name, "NVIDIA H100 80GB HBM3");
    EXPECT_FALSE((*gpus)[i].lost);
  }

  const GpuInfo& g = (*gpus)[0];
  EXPECT_EQ(g.uuid, "GPU-32f43199-39a3-ff78-f534-bb179cea074b");
  EXPECT_EQ(g.pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(g.serial, "1652923012871");
  EXPECT_EQ(g.memory_total_bytes, 81559 * kMiB);
  EXPECT_EQ(g.memory_used_bytes, 72941 * kMiB);
  EXPECT_EQ(g.memory_free_bytes, 8087 * kMiB);
  EXPECT_EQ(g.memory_reserved_bytes, 531 * kMiB);
  EXPECT_EQ(g.gpu_util_percent, 100u);
  EXPECT_EQ(g.memory_util_percent, 56u);
  EXPECT_EQ(g.temperature_c, 63u);
  EXPECT_EQ(g.power_draw_mw, 688190u);
  EXPECT_EQ(g.power_limit_mw, 700000u);
  EXPECT_EQ(g.sm_clock_mhz, 1980u);
  EXPECT_EQ(g.memory_clock_mhz, 2619u);
  EXPECT_EQ(g.max_sm_clock_mhz, 1980u);
  EXPECT_EQ(g.max_memory_clock_mhz, 2619u);
  EXPECT_EQ(g.fan_speed_percent, std::nullopt);  // datacenter boards have no fan of their own
  EXPECT_EQ(g.performance_state, 0u);
  EXPECT_EQ(g.compute_mode, "default");
  EXPECT_EQ(g.ecc.volatile_corrected, 0u);
  EXPECT_EQ(g.ecc.volatile_uncorrected, 0u);
  EXPECT_EQ(g.ecc.aggregate_corrected, 0u);
  EXPECT_EQ(g.ecc.aggregate_uncorrected, 0u);
  EXPECT_TRUE(g.processes.empty());

  EXPECT_EQ((*gpus)[3].ecc.aggregate_corrected, 3u);
  EXPECT_EQ((*gpus)[6].memory_used_bytes, 1 * kMiB);  // idle GPU: 1 MiB, not absent
  EXPECT_EQ((*gpus)[6].gpu_util_percent, 0u);         // idle is 0, not absent
  EXPECT_EQ((*gpus)[6].sm_clock_mhz, 345u);
  EXPECT_EQ((*gpus)[7].pci_bus_id, "00000000:DB:00.0");
}

TEST(ParseSmiGpuCsvTest, A100InMigModeHasNoUtilization) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("a100-mig/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(gpus->size(), 2u);

  const GpuInfo& mig = (*gpus)[0];
  EXPECT_EQ(mig.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(mig.gpu_util_percent, std::nullopt);
  EXPECT_EQ(mig.memory_util_percent, std::nullopt);
  EXPECT_EQ(mig.memory_total_bytes, 40960 * kMiB);
  EXPECT_EQ(mig.memory_used_bytes, 11008 * kMiB);
  EXPECT_EQ(mig.power_draw_mw, 88410u);
  EXPECT_EQ(mig.power_limit_mw, 400000u);
  EXPECT_EQ(mig.max_sm_clock_mhz, 1410u);
  EXPECT_EQ(mig.max_memory_clock_mhz, 1215u);

  const GpuInfo& plain = (*gpus)[1];
  EXPECT_EQ(plain.gpu_util_percent, 0u);
  EXPECT_EQ(plain.memory_util_percent, 0u);
  EXPECT_EQ(plain.sm_clock_mhz, 210u);
}

TEST(ParseSmiGpuCsvTest, MixedV100AndT4OnDriverWithoutMemoryReserved) {
  std::string problems;
  std::optional<std::string> driver;
  auto gpus = ParseSmiGpuCsv(ReadData("v100-t4-r470/gpus.csv"), FieldsWithout("memory.reserved"),
                             &problems, &driver);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  EXPECT_EQ(driver, "470.256.02");
  ASSERT_EQ(gpus->size(), 4u);

  const GpuInfo& v100 = (*gpus)[0];
  EXPECT_EQ(v100.name, "Tesla V100-PCIE-32GB");
  EXPECT_EQ(v100.memory_total_bytes, 32510 * kMiB);
  EXPECT_EQ(v100.memory_used_bytes, 30211 * kMiB);
  EXPECT_EQ(v100.memory_free_bytes, 2299 * kMiB);
  EXPECT_EQ(v100.memory_reserved_bytes, std::nullopt);  // not asked: absent, not 0
  EXPECT_EQ(v100.power_draw_mw, 237460u);
  EXPECT_EQ(v100.power_limit_mw, 250000u);
  EXPECT_EQ((*gpus)[1].ecc.aggregate_corrected, 1u);

  const GpuInfo& idle_t4 = (*gpus)[2];
  EXPECT_EQ(idle_t4.name, "Tesla T4");
  EXPECT_EQ(idle_t4.pci_bus_id, "00000000:AF:00.0");
  EXPECT_EQ(idle_t4.performance_state, 8u);
  EXPECT_EQ(idle_t4.power_draw_mw, 9670u);
  EXPECT_EQ(idle_t4.power_limit_mw, 70000u);
  EXPECT_EQ(idle_t4.max_memory_clock_mhz, 5001u);
  EXPECT_EQ((*gpus)[3].compute_mode, "exclusive_process");

  // Read with the full field list, every row is one column short: that is why the backend
  // retries without the rejected field rather than parsing what an old driver printed.
  std::string full_problems;
  auto wrong = ParseSmiGpuCsv(ReadData("v100-t4-r470/gpus.csv"), SmiGpuFields(), &full_problems);
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(full_problems.find("line 1: expected 26 columns, found 25"), std::string::npos)
      << full_problems;
}

TEST(ParseSmiGpuCsvTest, UnifiedMemoryGpuHasNoMemoryReadingsButTheRestStands) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("gb10-unified/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(gpus->size(), 1u);
  const GpuInfo& g = (*gpus)[0];
  EXPECT_EQ(g.name, "NVIDIA GB10");
  EXPECT_EQ(g.pci_bus_id, "0000000F:01:00.0");
  EXPECT_EQ(g.memory_total_bytes, std::nullopt);
  EXPECT_EQ(g.memory_used_bytes, std::nullopt);
  EXPECT_EQ(g.memory_free_bytes, std::nullopt);
  EXPECT_EQ(g.memory_reserved_bytes, std::nullopt);
  EXPECT_EQ(g.MemoryUsagePercent(), std::nullopt);
  EXPECT_EQ(g.gpu_util_percent, 96u);
  EXPECT_EQ(g.temperature_c, 61u);
  EXPECT_EQ(g.power_draw_mw, 38270u);
  EXPECT_EQ(g.power_limit_mw, std::nullopt);
  EXPECT_EQ(g.sm_clock_mhz, 2418u);
  EXPECT_EQ(g.memory_clock_mhz, std::nullopt);
  EXPECT_EQ(g.serial, std::nullopt);
  EXPECT_EQ(g.ecc.volatile_corrected, std::nullopt);
  EXPECT_EQ(g.ecc.aggregate_uncorrected, std::nullopt);
}

TEST(ParseSmiGpuCsvTest, GeForceHasFanButNoEccOrSerial) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("rtx4090/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(gpus->size(), 1u);
  const GpuInfo& g = (*gpus)[0];
  EXPECT_EQ(g.name, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(g.fan_speed_percent, 42u);
  EXPECT_EQ(g.serial, std::nullopt);
  EXPECT_EQ(g.ecc.volatile_corrected, std::nullopt);
  EXPECT_EQ(g.ecc.volatile_uncorrected, std::nullopt);
  EXPECT_EQ(g.ecc.aggregate_corrected, std::nullopt);
  EXPECT_EQ(g.ecc.aggregate_uncorrected, std::nullopt);
  EXPECT_EQ(g.memory_total_bytes, 24564 * kMiB);
  EXPECT_EQ(g.memory_reserved_bytes, 396 * kMiB);
  EXPECT_EQ(g.performance_state, 2u);
  EXPECT_EQ(g.power_draw_mw, 212640u);
  EXPECT_EQ(g.power_limit_mw, 450000u);
  EXPECT_EQ(g.max_sm_clock_mhz, 3120u);
}

TEST(ParseSmiGpuCsvTest, EverySpellingOfNoValueIsAbsentAndTheRowStands) {
  const std::vector<std::string> fields = {"index", "uuid", "memory.used", "temperature.gpu"};
  for (const char* token :
       {"[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[GPU requires reset]",
        "[Insufficient Permissions]", "", "Unknown Error", "[Not Found]"}) {
    std::string problems;
    std::string text =
        "0, GPU-0d3e0f52-0d1a-4a7c-9d3b-0a51f1c5d2e1, " + std::string(token) + ", 44\n";
    auto gpus = ParseSmiGpuCsv(text, fields, &problems);
    ASSERT_TRUE(gpus.ok()) << token << ": " << gpus.status().ToString();
    ASSERT_EQ(gpus->size(), 1u) << token;
    EXPECT_EQ((*gpus)[0].memory_used_bytes, std::nullopt) << token;
    EXPECT_EQ((*gpus)[0].temperature_c, 44u) << token;
    EXPECT_FALSE((*gpus)[0].lost) << token;
    EXPECT_EQ(problems, "") << token;
  }
}

TEST(ParseSmiGpuCsvTest, TruncatedRowIsReportedAndTheOthersKept) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("malformed-truncated/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[2].index, 2u);
  EXPECT_EQ(problems, "line 4: expected 26 columns, found 5");
}

TEST(ParseSmiGpuCsvTest, GarbageNumberNamesLineAndColumn) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("malformed-garbage/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[0].index, 0u);
  EXPECT_EQ((*gpus)[1].index, 2u);
  EXPECT_EQ((*gpus)[2].index, 3u);
  EXPECT_EQ(problems, "line 2, column 7 (memory.used): \"72941 MiB\" is not a number");
}

TEST(ParseSmiGpuCsvTest, WrongColumnCountIsReportedAndTheOthersKept) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("malformed-columns/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_EQ((*gpus)[2].index, 3u);
  EXPECT_EQ(problems, "line 3: expected 26 columns, found 27");
}

TEST(ParseSmiGpuCsvTest, EmptyOutputHasNoGpusAndNoProblems) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("empty/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  EXPECT_TRUE(gpus->empty());
  EXPECT_EQ(problems, "");
}

TEST(ParseSmiGpuCsvTest, NoUsableRowIsAnError) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv("0, GPU-a, 12\nnonsense\n", SmiGpuFields(), &problems);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gpus.status().message().find("line 1: expected 26 columns, found 3"), std::string::npos)
      << gpus.status().message();
  EXPECT_NE(gpus.status().message().find("line 2: not a GPU row: nonsense"), std::string::npos);
}

TEST(ParseSmiGpuCsvTest, OtherBadNumbersAreReported) {
  const std::vector<std::string> fields = {"index", "uuid", "power.draw", "pstate",
                                           "temperature.gpu"};
  struct Case {
    const char* row;
    const char* problem;
  };
  for (const Case& c : {
           Case{"x1, GPU-a, 1.0, P0, 40", "line 1, column 1 (index): \"x1\" is not a number"},
           // "12,5" has no space after its comma: one cell, and not a number.
           Case{"0, GPU-a, 12,5, P0, 40",
                "line 1, column 3 (power.draw): \"12,5\" is not a number"},
           Case{"0, GPU-a, -3.5, P0, 40",
                "line 1, column 3 (power.draw): \"-3.5\" is out of range"},
           Case{"0, GPU-a, 1.0, P16, 40",
                "line 1, column 4 (pstate): \"P16\" is not a performance state (P0..P15)"},
           Case{"0, GPU-a, 1.0, P0, 99999999999",
                "line 1, column 5 (temperature.gpu): \"99999999999\" is out of range"},
           Case{"[N/A], GPU-a, 1.0, P0, 40", "line 1: GPU index unreadable ([N/A]); row left out"},
       }) {
    std::string problems;
    auto gpus = ParseSmiGpuCsv(std::string(c.row) + "\n", fields, &problems);
    EXPECT_FALSE(gpus.ok()) << c.row;
    EXPECT_EQ(problems, c.problem) << c.row;
  }
}

TEST(ParseSmiGpuCsvTest, PowerIsRoundedToWholeMilliwatts) {
  const std::vector<std::string> fields = {"index", "uuid", "power.draw", "power.limit"};
  std::string problems;
  auto gpus = ParseSmiGpuCsv("0, GPU-a, 69.88, 300.0\n1, GPU-b, 0.0005, 1e3\n", fields, &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].power_draw_mw, 69880u);
  EXPECT_EQ((*gpus)[0].power_limit_mw, 300000u);
  EXPECT_EQ((*gpus)[1].power_draw_mw, 1u);
  EXPECT_EQ((*gpus)[1].power_limit_mw, 1000000u);
}

TEST(ParseSmiGpuCsvTest, LostGpuKeepsItsIdentityAndNoReadings) {
  std::string problems;
  auto gpus = ParseSmiGpuCsv(ReadData("gpu-lost/gpus.csv"), SmiGpuFields(), &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 3u);
  EXPECT_FALSE((*gpus)[0].lost);
  EXPECT_FALSE((*gpus)[1].lost);
  const GpuInfo& lost = (*gpus)[2];
  EXPECT_TRUE(lost.lost);
  EXPECT_EQ(lost.index, 2u);
  EXPECT_EQ(lost.uuid, "GPU-7768310c-a603-2f55-313e-877bd86dfcbd");
  EXPECT_EQ(lost.pci_bus_id, "00000000:3A:00.0");
  EXPECT_EQ(lost.memory_total_bytes, std::nullopt);
  EXPECT_EQ(lost.temperature_c, std::nullopt);
  EXPECT_EQ(lost.power_draw_mw, std::nullopt);
  // The GPU nvidia-smi had no handle for is named in the problems, as nvidia-smi said it.
  EXPECT_EQ(problems,
            "line 4: not a GPU row: Unable to determine the device handle for GPU "
            "00000000:5D:00.0: GPU is lost.  Reboot the system to recover this GPU");
}

TEST(ParseSmiGpuCsvTest, LostReadingsFromARowWithNumbersAreDropped) {
  const std::vector<std::string> fields = {"index", "uuid", "temperature.gpu", "power.draw"};
  auto gpus = ParseSmiGpuCsv("4, GPU-e, 55, [GPU is lost]\n", fields, nullptr);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_TRUE((*gpus)[0].lost);
  EXPECT_EQ((*gpus)[0].temperature_c, std::nullopt);
}

TEST(ParseSmiGpuCsvTest, UnreadableUuidKeepsTheGpuAndSaysSo) {
  const std::vector<std::string> fields = {"index", "uuid", "temperature.gpu"};
  std::string problems;
  auto gpus = ParseSmiGpuCsv("0, [Unknown Error], 40\n", fields, &problems);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].uuid, "");
  EXPECT_EQ((*gpus)[0].temperature_c, 40u);
  EXPECT_EQ(problems,
            "line 1: GPU 0 uuid unreadable ([Unknown Error]); its processes cannot be attached");
}

TEST(ParseSmiGpuCsvTest, FieldsMustIdentifyTheGpu) {
  auto gpus = ParseSmiGpuCsv("0, 40\n", {"index", "temperature.gpu"}, nullptr);
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gpus.status().message().find("uuid"), std::string::npos);
}

TEST(ParseSmiGpuCsvTest, CrLfLineEndingsAreAccepted) {
  const std::vector<std::string> fields = {"index", "uuid", "compute_mode"};
  auto gpus =
      ParseSmiGpuCsv("0, GPU-a, Prohibited\r\n1, GPU-b, Exclusive_Thread\r\n", fields, nullptr);
  ASSERT_TRUE(gpus.ok()) << gpus.status().ToString();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].compute_mode, "prohibited");
  EXPECT_EQ((*gpus)[1].compute_mode, "exclusive_thread");
}

// --- ParseSmiAppsCsv ---------------------------------------------------------------------------

TEST(ParseSmiAppsCsvTest, NamesWithSpacesAndCommasSurvive) {
  std::string problems;
  auto apps = ParseSmiAppsCsv(ReadData("h100x8/apps.csv"), &problems);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(apps->size(), 8u);

  const auto& [first_uuid, first] = (*apps)[0];
  EXPECT_EQ(first_uuid, "GPU-32f43199-39a3-ff78-f534-bb179cea074b");
  EXPECT_EQ(first.pid, 48211u);
  EXPECT_EQ(first.type, ProcessType::kCompute);
  EXPECT_EQ(first.used_memory_bytes, 72418 * kMiB);
  EXPECT_EQ(first.name, "python3");
  EXPECT_EQ(first.command, "/usr/bin/python3");

  const auto& [render_uuid, render] = (*apps)[7];
  EXPECT_EQ(render_uuid, "GPU-12f7abf6-2134-07b6-29c8-aaa537ab4395");
  EXPECT_EQ(render.pid, 52210u);
  EXPECT_EQ(render.command, "/opt/Render Farm, Inc/bin/render worker");
  EXPECT_EQ(render.name, "render worker");
  EXPECT_EQ(render.used_memory_bytes, 6144 * kMiB);
}

TEST(ParseSmiAppsCsvTest, UnknownUsedMemoryIsAbsent) {
  std::string problems;
  auto apps = ParseSmiAppsCsv(ReadData("a100-mig/apps.csv"), &problems);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  EXPECT_EQ(problems, "");
  ASSERT_EQ(apps->size(), 2u);
  EXPECT_EQ((*apps)[0].second.pid, 91822u);
  EXPECT_EQ((*apps)[0].second.used_memory_bytes, std::nullopt);
  EXPECT_EQ((*apps)[1].second.name, "tritonserver");
}

TEST(ParseSmiAppsCsvTest, BadRowsAreReportedAndTheOthersKept) {
  const std::string text =
      "GPU-a, abc, /usr/bin/python3, 12\n"
      "GPU-a, 12, /usr/bin/python3\n"
      "[N/A], 55, /usr/bin/python3, 3\n"
      "GPU-a, 77, /usr/bin/python3, 1.5\n"
      "GPU-b, 901, [N/A], 100\n";
  std::string problems;
  auto apps = ParseSmiAppsCsv(text, &problems);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  ASSERT_EQ(apps->size(), 1u);
  EXPECT_EQ((*apps)[0].first, "GPU-b");
  EXPECT_EQ((*apps)[0].second.pid, 901u);
  EXPECT_EQ((*apps)[0].second.name, std::nullopt);
  EXPECT_EQ((*apps)[0].second.command, std::nullopt);
  EXPECT_EQ(problems,
            "line 1, column 2 (pid): \"abc\" is not a number; "
            "line 2: expected 4 columns (gpu_uuid, pid, process_name, used_memory): "
            "GPU-a, 12, /usr/bin/python3; "
            "line 3: process 55 has no GPU uuid ([N/A]); "
            "line 4, column 4 (used_memory): \"1.5\" is not a number");
}

TEST(ParseSmiAppsCsvTest, OldStyleMigUuidMapsToItsGpu) {
  auto apps = ParseSmiAppsCsv(
      "MIG-GPU-0deb68ce-98a4-11dd-c381-739dae57b98b/3/0, 4242, /usr/bin/python3, 4864\n", nullptr);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  ASSERT_EQ(apps->size(), 1u);
  EXPECT_EQ((*apps)[0].first, "GPU-0deb68ce-98a4-11dd-c381-739dae57b98b");
  EXPECT_EQ((*apps)[0].second.gpu_instance_id, 3u);
  EXPECT_EQ((*apps)[0].second.compute_instance_id, 0u);
}

TEST(ParseSmiAppsCsvTest, EmptyNameAndEmptyOutput) {
  auto apps = ParseSmiAppsCsv("GPU-a, 10, , 20\n", nullptr);
  ASSERT_TRUE(apps.ok()) << apps.status().ToString();
  ASSERT_EQ(apps->size(), 1u);
  EXPECT_EQ((*apps)[0].second.name, std::nullopt);
  EXPECT_EQ((*apps)[0].second.used_memory_bytes, 20 * kMiB);

  auto none = ParseSmiAppsCsv("", nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());

  auto garbage = ParseSmiAppsCsv("No running processes found\n", nullptr);
  EXPECT_FALSE(garbage.ok());
}

TEST(SmiRejectedFieldTest, ReadsNvidiaSmisAnswer) {
  EXPECT_EQ(SmiRejectedField(ReadData("v100-t4-r470/field-error.txt")), "memory.reserved");
  EXPECT_EQ(SmiRejectedField("Field \xE2\x80\x9C"
                             "encoder.stats.sessionCount\xE2\x80\x9D"
                             " is not a valid field to query.\n"),
            "encoder.stats.sessionCount");
  EXPECT_EQ(SmiRejectedField(ReadData("h100x8/gpus.csv")), std::nullopt);
  EXPECT_EQ(SmiRejectedField(""), std::nullopt);
}

// --- SmiBackend with an in-process runner ------------------------------------------------------

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
