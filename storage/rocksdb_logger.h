// RocksDB's own log lines (its "info log") go through spdlog to stderr
// instead of a LOG file inside the store directory.
//
// Why: a LOG file lives on the same disk as the store. When that disk is
// full, RocksDB 7.8 (Debian's, built with assertions) first fails a LOG
// append and then, logging the write error itself, asserts on the failed
// LOG writer and aborts the process: a full disk became a crash instead of
// the clear error the processor stops with. Routing the info log away from
// the disk removes that path.
//
// Levels: RocksDB's DEBUG/INFO/HEADER lines (option dumps, flush and
// compaction notes) are spdlog debug; WARN warn; ERROR and FATAL error.
#ifndef BUBBLEWATCH_STORAGE_ROCKSDB_LOGGER_H_
#define BUBBLEWATCH_STORAGE_ROCKSDB_LOGGER_H_

#include <memory>

#include "rocksdb/env.h"

namespace bubblewatch {

std::shared_ptr<rocksdb::Logger> NewSpdlogRocksDbLogger();

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_STORAGE_ROCKSDB_LOGGER_H_
