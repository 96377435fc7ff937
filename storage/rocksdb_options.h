// RocksDB settings of the window store: column families, the shared block
// cache and the memtable budgets derived from WindowStoreOptions.
#ifndef BUBBLEWATCH_STORAGE_ROCKSDB_OPTIONS_H_
#define BUBBLEWATCH_STORAGE_ROCKSDB_OPTIONS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "storage/window_store.h"

namespace bubblewatch {

inline constexpr char kWindowsColumnFamily[] = "windows";
inline constexpr char kJobsColumnFamily[] = "jobs";
inline constexpr char kProgressColumnFamily[] = "progress";
inline constexpr char kLatestColumnFamily[] = "latest";

struct RocksDbConfig {
  rocksdb::DBOptions db;
  // default, windows, jobs, progress, latest: in this order.
  std::vector<rocksdb::ColumnFamilyDescriptor> column_families;
  std::shared_ptr<rocksdb::Cache> block_cache;  // Shared by all of them.
  int64_t memtable_budget = 0;                  // Bytes, all families.
};

// Options for a primary (creates what is missing) or, with `secondary`, a
// secondary instance (max_open_files = -1, as RocksDB requires).
// `env` may be null for the default Env; it must outlive the database.
RocksDbConfig MakeRocksDbConfig(const WindowStoreOptions& options,
                                bool secondary, rocksdb::Env* env);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_ROCKSDB_OPTIONS_H_
