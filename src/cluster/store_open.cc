#include "cluster/store_open.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <spdlog/spdlog.h>
#include <sstream>

#include "common/strings.h"
#include "gpu/json.h"

namespace flyt::cluster {
namespace {

// var_dir/store.created: the creation time of each store this manager has used, by Describe().
std::map<std::string, int64_t> ReadStoreRecord(const std::filesystem::path& path) {
  std::map<std::string, int64_t> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    int64_t created_ms = 0;
    std::string store;
    if (fields >> created_ms >> store) out[store] = created_ms;
  }
  return out;
}

Status WriteStoreRecord(const std::filesystem::path& path,
                              const std::map<std::string, int64_t>& record) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path temp = path.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    for (const auto& [store, created_ms] : record) out << created_ms << " " << store << "\n";
    out.flush();
    if (!out) return Internal("cannot write " + temp.string());
  }
  std::filesystem::rename(temp, path, ec);
  if (ec) return ErrnoError("rename " + temp.string(), ec.value());
  return Status::Ok();
}

std::string FormatMs(int64_t ms) {
  return gpu::FormatTime(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

}  // namespace

Result<std::unique_ptr<store::Store>> OpenClusterStore(const ClusterConfig& config, bool init) {
  using store::OpenMode;
  using store::Store;
  FLYT_ASSIGN_OR_RETURN(const std::string describe, Store::DescribeUrl(config.store));
  const std::filesystem::path record_path =
      std::filesystem::path(config.var_dir) / kStoreRecordFile;
  std::map<std::string, int64_t> record = ReadStoreRecord(record_path);
  const auto recorded = record.find(describe);
  const bool sqlite = StartsWith(describe, "sqlite:");
  auto opened = Store::Open(config.store, OpenMode::kExisting);
  const std::string reason = opened.ok() ? std::string() : opened.status().reason();
  const bool missing = reason == store::kStoreMissingReason;
  const bool uninitialized = reason == store::kStoreUninitializedReason;
  const std::string what_to_do =
      "restore it from a backup; or, to start a new, empty store on purpose (every lease and job "
      "it held is forgotten), run flyt-cluster-manager --store-init";
  if (init) {
    if (opened.ok()) {
      FLYT_ASSIGN_OR_RETURN(const int64_t revision, (*opened)->Revision());
      if (revision > 0) {
        return Status(StatusCode::kFailedPrecondition,
                            describe + " already holds a flyt store (created " +
                                FormatMs((*opened)->CreatedMs()) + ", " +
                                std::to_string(revision) +
                                " changes): --store-init creates a store only where there is "
                                "none; to start over, stop its managers and move it away first");
      }
    } else if (missing || uninitialized) {
      opened = Store::Open(config.store, OpenMode::kCreate);
      if (opened.ok()) spdlog::warn("--store-init: created a new, empty store {}", describe);
    }
  } else if (missing && recorded == record.end()) {
    // The first start: no store, and none was ever made here.
    opened = Store::Open(config.store, OpenMode::kCreate);
    if (opened.ok()) spdlog::info("created a new store {}", describe);
  } else if (uninitialized && !sqlite && recorded == record.end()) {
    // A PostgreSQL database made for flyt (createdb) starts empty: the first start fills it.
    opened = Store::Open(config.store, OpenMode::kCreate);
    if (opened.ok()) spdlog::info("created flyt's tables in {}", describe);
  } else if (missing || uninitialized) {
    std::string message = opened.status().message();
    if (recorded != record.end()) {
      message += ", but this manager's record (" + record_path.string() + ") says a store was "
                 "created there at " + FormatMs(recorded->second);
    }
    return Status(StatusCode::kFailedPrecondition,
                        message + "; refusing to start on an empty store: " + what_to_do);
  }
  if (!opened.ok()) {
    if (opened.status().reason() == store::kStoreDamagedReason) {
      return opened.status().WithContext(
          "refusing to start on a damaged store; restore it from a backup (or move it away and "
          "run flyt-cluster-manager --store-init to start a new, empty one)");
    }
    return opened.status();
  }
  const int64_t created_ms = (*opened)->CreatedMs();
  if (!init && recorded != record.end() && recorded->second != created_ms) {
    return Status(StatusCode::kFailedPrecondition,
                        describe + " was created at " + FormatMs(created_ms) +
                            ", but this manager's record (" + record_path.string() +
                            ") says its store was created at " + FormatMs(recorded->second) +
                            ": it was replaced by another one; " + what_to_do);
  }
  if (recorded == record.end() || recorded->second != created_ms) {
    record[describe] = created_ms;
    FLYT_RETURN_IF_ERROR(WriteStoreRecord(record_path, record));
  }
  return std::move(opened).value();
}


}  // namespace flyt::cluster
