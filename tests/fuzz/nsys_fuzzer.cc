// libFuzzer target: the Nsight Systems reader on generated SQLite files.
// The input is an SQL script (the seeds build small nsys-like exports); it is
// run into a fresh database file, which ReadNsysExport then reads. Mutating
// the script varies tables, columns, types and values — what a real export
// from another nsys version, a trimmed one or a hostile one could hold.
// Scripts may not ATTACH other files or change PRAGMAs, and a script that
// runs too long is cut off, so one input cannot stall the run.
#include <sqlite3.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "ingest/nsys/nsys_reader.h"
#include "tests/fuzz/trace_invariants.h"

namespace {

int Authorize(void*, int action, const char*, const char*, const char*,
              const char*) {
  switch (action) {
    case SQLITE_ATTACH:
    case SQLITE_DETACH:
    case SQLITE_PRAGMA:
      return SQLITE_DENY;
    default:
      return SQLITE_OK;
  }
}

// Stops a script after about a million virtual machine steps.
int Progress(void* steps) { return ++*static_cast<int*>(steps) > 1000; }

// In /dev/shm when there is one: a file per input, so memory beats disk.
const std::string& DbPath() {
  static const std::string path =
      std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
      "/bubblewatch_nsys_fuzz_" + std::to_string(getpid()) + ".sqlite";
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  const std::string& path = DbPath();
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
    sqlite3_close(db);
    return 0;
  }
  sqlite3_set_authorizer(db, Authorize, nullptr);
  int steps = 0;
  sqlite3_progress_handler(db, 1000, Progress, &steps);
  sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 1 << 20);
  std::string sql(reinterpret_cast<const char*>(data), size);
  sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);  // Errors: fine.
  sqlite3_close(db);
  absl::StatusOr<bubblewatch::Trace> trace = bubblewatch::ReadNsysExport(path);
  if (trace.ok()) bubblewatch::CheckTraceInvariants(*trace);
  std::remove(path.c_str());
  return 0;
}
