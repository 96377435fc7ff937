#include "storage/rocksdb_options.h"

#include <algorithm>

#include "rocksdb/filter_policy.h"
#include "rocksdb/table.h"
#include "storage/rocksdb_logger.h"

namespace bubblewatch {
namespace {

// The progress and default families hold a few hundred bytes per partition;
// they never need the windows' memtable size.
constexpr int64_t kSmallMemtableBytes = int64_t{4} << 20;

rocksdb::ColumnFamilyOptions FamilyOptions(
    const std::shared_ptr<rocksdb::Cache>& cache, int64_t memtable_bytes,
    int max_memtables, size_t block_size) {
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  table.block_size = block_size;
  // Index and filter blocks live in (and are bounded by) the block cache;
  // partitioned, so only the top level of each stays pinned.
  table.cache_index_and_filter_blocks = true;
  table.cache_index_and_filter_blocks_with_high_priority = true;
  table.pin_top_level_index_and_filter = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
  table.partition_filters = true;
  // Whole-key Bloom filters make Commit's "does this window exist?" probe
  // for a replayed window cheap.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.optimize_filters_for_memory = true;

  rocksdb::ColumnFamilyOptions cf;
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  cf.write_buffer_size = static_cast<size_t>(memtable_bytes);
  cf.max_write_buffer_number = max_memtables;
  cf.compression = rocksdb::kLZ4Compression;
  cf.bottommost_compression = rocksdb::kLZ4Compression;
  cf.level_compaction_dynamic_level_bytes = true;
  return cf;
}

}  // namespace

RocksDbConfig MakeRocksDbConfig(const WindowStoreOptions& options,
                                bool secondary, rocksdb::Env* env) {
  RocksDbConfig config;
  config.block_cache =
      rocksdb::NewLRUCache(static_cast<size_t>(options.block_cache_bytes));

  rocksdb::DBOptions& db = config.db;
  if (env != nullptr) db.env = env;
  db.create_if_missing = !secondary;
  db.create_missing_column_families = !secondary;
  db.max_background_jobs = 2;
  db.bytes_per_sync = 1 << 20;
  // RocksDB's info log goes to spdlog, not a LOG file on the store's disk
  // (storage/rocksdb_logger.h: a full disk must not abort the process).
  db.info_log = NewSpdlogRocksDbLogger();
  db.max_open_files = -1;  // Required by secondaries; fine for primaries.

  const int64_t big = std::max<int64_t>(options.write_buffer_bytes, 1 << 20);
  const int64_t small = std::min(big, kSmallMemtableBytes);
  const int n = std::max(options.max_write_buffers, 2);
  // Windows are ~1-3 KB and read in runs of hundreds: larger blocks mean
  // fewer index entries and fewer block reads per scan.
  config.column_families = {
      {rocksdb::kDefaultColumnFamilyName,
       FamilyOptions(config.block_cache, small, n, 4 << 10)},
      {kWindowsColumnFamily,
       FamilyOptions(config.block_cache, big, n, 16 << 10)},
      {kJobsColumnFamily, FamilyOptions(config.block_cache, big, n, 4 << 10)},
      {kProgressColumnFamily,
       FamilyOptions(config.block_cache, small, n, 4 << 10)},
      // Each job's newest window, rewritten by nearly every commit: a big
      // memtable keeps most of it in memory.
      {kLatestColumnFamily,
       FamilyOptions(config.block_cache, big, n, 16 << 10)},
  };
  config.memtable_budget = (3 * big + 2 * small) * n;
  return config;
}

}  // namespace bubblewatch
