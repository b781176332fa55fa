// OpenClusterStore: how flyt-cluster-manager opens its store so that a store that has existed
// never silently restarts empty. The manager keeps a record of each store it created or used
// (var_dir/store.created: "<created_ms> <store>" per line, the store's own meta 'created_ms'), and
// refuses to start on a store that is missing while the record names it, on an empty (0-byte)
// file or a database without flyt's schema, or on a store created at another time than the
// record says (it was replaced). `init` (--store-init) creates a new, empty store on purpose and
// refuses where one with data exists. Only a first start (no file, no record) creates one without
// being asked. The error names the store, the record and what to do. Not thread-safe (start-up).
#pragma once

#include <memory>

#include "cluster/config.h"
#include "common/status.h"
#include "store/store.h"

namespace flyt::cluster {

inline constexpr const char* kStoreRecordFile = "store.created";

Result<std::unique_ptr<store::Store>> OpenClusterStore(const ClusterConfig& config, bool init);

}  // namespace flyt::cluster
