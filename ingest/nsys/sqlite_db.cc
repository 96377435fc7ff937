#include "ingest/nsys/sqlite_db.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace bubblewatch {
namespace {

absl::Status ErrnoStatus(absl::string_view path) {
  int err = errno;
  std::string message =
      absl::StrCat("cannot open ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

// "file:" URI for `path` with every byte outside [A-Za-z0-9/._~-] escaped,
// so '?', '#' and '%' in file names stay part of the name.
std::string FileUri(absl::string_view path) {
  std::string uri = "file:";
  for (char c : path) {
    unsigned char u = static_cast<unsigned char>(c);
    if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') ||
        (u >= '0' && u <= '9') || c == '/' || c == '.' || c == '_' ||
        c == '~' || c == '-') {
      uri.push_back(c);
    } else {
      absl::StrAppendFormat(&uri, "%%%02X", u);
    }
  }
  uri += "?immutable=1";
  return uri;
}

}  // namespace

absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view context) {
  std::string message = absl::StrCat(
      context, ": ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
      return absl::InvalidArgumentError(message);
    case SQLITE_CORRUPT:
      return absl::DataLossError(message);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
      return absl::UnavailableError(message);
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<bool> SqliteStatement::Step() {
  int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteStatus(
      db_, rc, absl::StrCat("reading \"", sqlite3_sql(stmt_.get()), "\""));
}

void SqliteStatement::Reset() {
  sqlite3_reset(stmt_.get());
  sqlite3_clear_bindings(stmt_.get());
}

absl::Status SqliteStatement::BindInt64(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_.get(), index, value);
  if (rc != SQLITE_OK) return SqliteStatus(db_, rc, "binding a parameter");
  return absl::OkStatus();
}

bool SqliteStatement::IsNull(int column) const {
  return Type(column) == SQLITE_NULL;
}

int SqliteStatement::Type(int column) const {
  return sqlite3_column_type(stmt_.get(), column);
}

int64_t SqliteStatement::Int64(int column) const {
  return sqlite3_column_int64(stmt_.get(), column);
}

absl::string_view SqliteStatement::Text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_.get(), column);
  if (text == nullptr) return {};
  return absl::string_view(
      reinterpret_cast<const char*>(text),
      static_cast<size_t>(sqlite3_column_bytes(stmt_.get(), column)));
}

absl::StatusOr<SqliteDb> SqliteDb::Open(absl::string_view path) {
  // Check the file ourselves first: SQLite opens lazily and would report a
  // missing or foreign file only at the first query, and less clearly.
  std::string p(path);
  FILE* f = std::fopen(p.c_str(), "rb");
  if (f == nullptr) return ErrnoStatus(path);
  char head[16] = {};
  size_t n = std::fread(head, 1, sizeof(head), f);
  std::fclose(f);
  if (absl::string_view(head, n) !=
      absl::string_view("SQLite format 3\0", 16)) {
    return absl::InvalidArgumentError("not an SQLite database");
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(FileUri(path).c_str(), &db,
                           SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
  SqliteDb result(db);  // Closes db even when the open failed.
  if (rc != SQLITE_OK) {
    return SqliteStatus(db, rc, absl::StrCat("cannot open ", path));
  }
  return result;
}

absl::StatusOr<SqliteStatement> SqliteDb::Prepare(absl::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_.get(), sql.data(),
                              static_cast<int>(sql.size()), &stmt, nullptr);
  SqliteStatement statement(db_.get(), stmt);
  if (rc != SQLITE_OK) {
    return SqliteStatus(db_.get(), rc, absl::StrCat("preparing \"", sql, "\""));
  }
  return statement;
}

absl::StatusOr<absl::flat_hash_set<std::string>> SqliteDb::TableNames() {
  ASSIGN_OR_RETURN(SqliteStatement statement,
                   Prepare("SELECT name FROM sqlite_master "
                           "WHERE type IN ('table', 'view')"));
  absl::flat_hash_set<std::string> names;
  while (true) {
    ASSIGN_OR_RETURN(bool row, statement.Step());
    if (!row) break;
    names.emplace(statement.Text(0));
  }
  return names;
}

absl::StatusOr<absl::flat_hash_set<std::string>> SqliteDb::ColumnNames(
    absl::string_view table) {
  ASSIGN_OR_RETURN(SqliteStatement statement,
                   Prepare("SELECT name FROM pragma_table_info(?1)"));
  int rc = sqlite3_bind_text(statement.stmt_.get(), 1, table.data(),
                             static_cast<int>(table.size()), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) return SqliteStatus(db_.get(), rc, "binding a table");
  absl::flat_hash_set<std::string> names;
  while (true) {
    ASSIGN_OR_RETURN(bool row, statement.Step());
    if (!row) break;
    names.emplace(statement.Text(0));
  }
  return names;
}

}  // namespace bubblewatch
