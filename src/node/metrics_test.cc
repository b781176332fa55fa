#include "node/metrics.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>

#include "common/strings.h"

namespace flyt::node {
namespace {

gpu::GpuSnapshot Snapshot() {
  gpu::GpuSnapshot s;
  s.driver_version = "580.65.06";
  gpu::GpuInfo a;
  a.index = 0;
  a.uuid = "GPU-aaaa";
  a.name = "NVIDIA H100 80GB HBM3";
  a.pci_bus_id = "00000000:18:00.0";
  a.gpu_util_percent = 97;
  a.memory_used_bytes = 73220ULL << 20;
  a.memory_free_bytes = 7810ULL << 20;
  a.memory_reserved_bytes = 529ULL << 20;
  a.power_draw_mw = 661760;
  a.energy_mj = 123456789;
  a.temperature_c = 67;
  gpu::ProcessInfo p;
  p.pid = 41000;
  p.name = "python3";
  p.user = "alice";
  p.used_memory_bytes = 73216ULL << 20;
  p.sm_util_percent = 97;
  a.processes.push_back(p);
  gpu::GpuInfo lost;
  lost.index = 1;
  lost.uuid = "GPU-bbbb";
  lost.name = "NVIDIA H100 80GB HBM3";
  lost.lost = true;
  s.gpus = {a, lost};
  return s;
}

std::string Render() {
  gpu::GpuSnapshot snap = Snapshot();
  MetricsInput in;
  in.snapshot = &snap;
  in.events[0].by_xid[13] = 2;
  in.events[0].last_xid = 13;
  in.events_supported = true;
  in.hostname = "node-a";
  in.node_name = "node-a";
  in.version = "0.1.0";
  return RenderMetrics(in);
}

TEST(MetricsTest, DcgmExporterNamesLabelsAndUnits) {
  std::string out = Render();
  const std::string labels =
      R"(gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:18:00.0",device="nvidia0",)"
      R"(modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.65.06")";
  EXPECT_NE(out.find("DCGM_FI_DEV_GPU_UTIL{" + labels + "} 97\n"), std::string::npos) << out;
  EXPECT_NE(out.find("DCGM_FI_DEV_FB_USED{" + labels + "} 73220\n"), std::string::npos);  // MiB
  EXPECT_NE(out.find("DCGM_FI_DEV_FB_FREE{" + labels + "} 7810\n"), std::string::npos);
  EXPECT_NE(out.find("DCGM_FI_DEV_FB_RESERVED{" + labels + "} 529\n"), std::string::npos);
  EXPECT_NE(out.find("DCGM_FI_DEV_POWER_USAGE{" + labels + "} 661.76\n"), std::string::npos);  // W
  EXPECT_NE(out.find("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter"), std::string::npos);
  EXPECT_NE(out.find("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" + labels + "} 123456789\n"),
            std::string::npos);
  EXPECT_NE(out.find("DCGM_FI_DEV_XID_ERRORS{" + labels +
                     R"(,err_code="13",err_msg="Graphics Engine Exception"} 13)" + "\n"),
            std::string::npos);
}

TEST(MetricsTest, AbsentReadingsAndLostGpusEmitNoReadingSeries) {
  std::string out = Render();
  EXPECT_EQ(out.find("DCGM_FI_DEV_SM_CLOCK"), std::string::npos);  // never read: no family at all
  EXPECT_EQ(out.find("UUID=\"GPU-bbbb\",pci_bus_id"), std::string::npos);  // lost GPU: no readings
  EXPECT_NE(out.find("flyt_gpu_lost{gpu=\"1\",UUID=\"GPU-bbbb\"} 1\n"), std::string::npos);
  EXPECT_NE(out.find("flyt_gpu_lost{gpu=\"0\",UUID=\"GPU-aaaa\"} 0\n"), std::string::npos);
}

TEST(MetricsTest, FlytSeriesFollowPrometheusConventions) {
  std::string out = Render();
  EXPECT_NE(out.find(R"(flyt_gpu_process_memory_used_bytes{gpu="0",UUID="GPU-aaaa",pid="41000",)"
                     R"(process_name="python3",user="alice",container=""} 76772540416)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("flyt_gpu_process_sm_utilization_ratio{"), std::string::npos);
  EXPECT_NE(out.find("} 0.97\n"), std::string::npos);
  EXPECT_NE(out.find(R"(flyt_gpu_xid_events_total{gpu="0",UUID="GPU-aaaa",xid="13"} 2)"),
            std::string::npos);
  EXPECT_NE(out.find(R"(flyt_build_info{version="0.1.0",node="node-a"} 1)"), std::string::npos);
}

// Every sample line belongs to a family declared with HELP and TYPE before it, each family once,
// and every line parses as the text format.
TEST(MetricsTest, ExpositionFormatIsWellFormed) {
  std::istringstream in(Render());
  std::set<std::string> typed, helped;
  std::string line;
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+-]+$)");
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(helped.insert(name).second) << "HELP twice for " << name;
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(typed.insert(name).second) << "TYPE twice for " << name;
      continue;
    }
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
    EXPECT_TRUE(typed.count(m[1]) && helped.count(m[1])) << "no HELP/TYPE before " << line;
  }
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

// A process title that is not UTF-8 must not make Prometheus refuse the node's whole scrape.
TEST(MetricsTest, ProcessTitlesThatAreNotUtf8StayValidUtf8) {
  gpu::GpuSnapshot snap = Snapshot();
  snap.gpus[0].processes[0].name = std::string("caf\xe9\xff");
  MetricsInput in;
  in.snapshot = &snap;
  std::string out = RenderMetrics(in);
  EXPECT_NE(out.find("process_name=\"caf\xef\xbf\xbd\xef\xbf\xbd\""), std::string::npos);
  EXPECT_EQ(SanitizeUtf8(out), out);  // the whole page is valid UTF-8
}

}  // namespace
}  // namespace flyt::node
