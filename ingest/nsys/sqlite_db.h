// A read-only SQLite database and its prepared statements: the one place where
// SQLite result codes become absl::Status (STYLE.md: convert third-party
// errors at one boundary).
#ifndef BUBBLEWATCH_INGEST_NSYS_SQLITE_DB_H_
#define BUBBLEWATCH_INGEST_NSYS_SQLITE_DB_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {

// One prepared statement. Move-only; finalized on destruction.
class SqliteStatement {
 public:
  // Steps to the next row: true when there is one, false when done.
  // Errors: see SqliteStatus.
  absl::StatusOr<bool> Step();

  // Rewinds the statement so it can be stepped again with new bindings.
  void Reset();

  // Binds `value` to the parameter at `index` (1-based).
  absl::Status BindInt64(int index, int64_t value);

  // Column accessors for the current row; `column` is 0-based.
  bool IsNull(int column) const;
  int Type(int column) const;  // SQLITE_INTEGER, SQLITE_TEXT, ...
  int64_t Int64(int column) const;
  // Valid until the next Step(), Reset() or destruction.
  absl::string_view Text(int column) const;

 private:
  friend class SqliteDb;
  struct Finalizer {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
  };
  SqliteStatement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}

  sqlite3* db_;
  std::unique_ptr<sqlite3_stmt, Finalizer> stmt_;
};

// An open database. Move-only; closed on destruction. Statements borrow it
// and must be destroyed first.
class SqliteDb {
 public:
  // Opens the file at `path` read-only and immutable (no locks, no journal,
  // nothing written next to it).
  // Errors: kNotFound / kPermissionDenied / kUnavailable when the file cannot
  // be read; kInvalidArgument "not an SQLite database" when it does not start
  // with the SQLite header.
  static absl::StatusOr<SqliteDb> Open(absl::string_view path);

  // Compiles `sql`. Errors: see SqliteStatus.
  absl::StatusOr<SqliteStatement> Prepare(absl::string_view sql);

  // The names of the tables and views in the database.
  absl::StatusOr<absl::flat_hash_set<std::string>> TableNames();

  // The column names of `table` (empty if there is no such table).
  absl::StatusOr<absl::flat_hash_set<std::string>> ColumnNames(
      absl::string_view table);

 private:
  struct Closer {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
  };
  explicit SqliteDb(sqlite3* db) : db_(db) {}

  std::unique_ptr<sqlite3, Closer> db_;
};

// Converts SQLite result code `rc` to a status whose message starts with
// `context` and ends with SQLite's own message for `db` (may be null).
// kInvalidArgument for a file that is not a database (SQLITE_NOTADB), kDataLoss
// for a corrupt one, kUnavailable for busy/locked/I/O, kResourceExhausted for
// out of memory, kInternal otherwise. REQUIRES: rc is an error code.
absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view context);

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_NSYS_SQLITE_DB_H_
