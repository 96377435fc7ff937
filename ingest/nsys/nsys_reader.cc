#include "ingest/nsys/nsys_reader.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "base/status_macros.h"
#include "ingest/nsys/sqlite_db.h"

namespace bubblewatch {
namespace {

constexpr absl::string_view kKernelTable = "CUPTI_ACTIVITY_KIND_KERNEL";
constexpr absl::string_view kMemcpyTable = "CUPTI_ACTIVITY_KIND_MEMCPY";
constexpr absl::string_view kMemsetTable = "CUPTI_ACTIVITY_KIND_MEMSET";
constexpr absl::string_view kRuntimeTable = "CUPTI_ACTIVITY_KIND_RUNTIME";
constexpr absl::string_view kDriverTable = "CUPTI_ACTIVITY_KIND_DRIVER";
constexpr absl::string_view kNvtxTable = "NVTX_EVENTS";
constexpr absl::string_view kStringsTable = "StringIds";
constexpr absl::string_view kSessionStartTable =
    "TARGET_INFO_SESSION_START_TIME";

// Column positions in the SELECTs below.
enum GpuColumn {
  kGpuStart,
  kGpuEnd,
  kGpuDevice,
  kGpuStream,
  kGpuCorrelation,
  kGpuPid,
  kGpuBytes,
  kGpuCopyKind,
  kGpuSrcKind,
  kGpuDstKind,
  kGpuMemKind,
  kGpuShortName,
  kGpuDemangledName,
  kGpuMangledName,
};
constexpr absl::string_view kGpuColumns[] = {
    "start",     "end",       "deviceId",      "streamId",   "correlationId",
    "globalPid", "bytes",     "copyKind",      "srcKind",    "dstKind",
    "memKind",   "shortName", "demangledName", "mangledName"};
enum ApiColumn { kApiStart, kApiEnd, kApiTid, kApiCorrelation, kApiName };
constexpr absl::string_view kApiColumns[] = {"start", "end", "globalTid",
                                             "correlationId", "nameId"};
enum NvtxColumn { kNvtxStart, kNvtxEnd, kNvtxTid, kNvtxText, kNvtxTextId };
constexpr absl::string_view kNvtxColumns[] = {"start", "end", "globalTid",
                                              "text", "textId"};

// The process id in an Nsight Systems globalPid / globalTid.
uint32_t ProcessOf(int64_t global_id) {
  return static_cast<uint32_t>((static_cast<uint64_t>(global_id) >> 24) &
                               0xFFFFFF);
}

// A correlation id made unique per trace: the process in the high 32 bits.
CorrelationId Fold(uint32_t process, int64_t correlation) {
  if (correlation == 0) return kNoCorrelation;
  return (static_cast<uint64_t>(process) << 32) |
         static_cast<uint32_t>(correlation);
}

// ENUM_CUDA_MEMCPY_OPER, in Kineto's short spelling.
absl::string_view CopyKindName(int64_t kind) {
  static constexpr absl::string_view kNames[] = {
      "",     "HtoD", "DtoH", "HtoA", "AtoH",     "AtoA",     "AtoD",
      "DtoA", "DtoD", "HtoH", "PtoP", "UVM HtoD", "UVM DtoH", "UVM DtoD"};
  if (kind < 0 || kind >= static_cast<int64_t>(std::size(kNames))) return "";
  return kNames[kind];
}

// ENUM_CUDA_MEM_KIND labels.
absl::string_view MemKindName(int64_t kind) {
  static constexpr absl::string_view kNames[] = {
      "Pageable", "Pinned",        "Device",         "Array",
      "Managed",  "Device Static", "Managed Static", "Unknown"};
  if (kind < 0 || kind >= static_cast<int64_t>(std::size(kNames))) {
    return "Unknown";
  }
  return kNames[kind];
}

// "SELECT a, NULL, c FROM table": columns the table lacks read as NULL.
// Errors: kInvalidArgument when it lacks "start" or "end".
absl::StatusOr<std::string> SelectSql(
    absl::string_view table, const absl::flat_hash_set<std::string>& have,
    absl::Span<const absl::string_view> wanted) {
  for (const char* required : {"start", "end"}) {
    if (!have.contains(required)) {
      return absl::InvalidArgumentError(
          absl::StrCat("not an Nsight Systems export: table ", table,
                       " has no column \"", required, "\""));
    }
  }
  std::string sql = "SELECT ";
  for (absl::string_view column : wanted) {
    if (sql.size() > 7) sql += ", ";
    sql += have.contains(column) ? absl::StrCat("\"", column, "\"")
                                 : std::string("NULL");
  }
  absl::StrAppend(&sql, " FROM \"", table, "\"");
  return sql;
}

class NsysReader {
 public:
  NsysReader(SqliteDb* db, absl::flat_hash_set<std::string> tables)
      : db_(db), tables_(std::move(tables)), names_(&trace_) {}

  absl::StatusOr<Trace> Read() {
    RETURN_IF_ERROR(ReadTimeOffset());
    RETURN_IF_ERROR(
        ReadApiCalls(kRuntimeTable, CpuEventCategory::kCudaRuntime));
    RETURN_IF_ERROR(ReadApiCalls(kDriverTable, CpuEventCategory::kCudaDriver));
    RETURN_IF_ERROR(ReadNvtx());
    RETURN_IF_ERROR(ReadGpu(kKernelTable, GpuActivityKind::kKernel));
    RETURN_IF_ERROR(ReadGpu(kMemcpyTable, GpuActivityKind::kMemcpy));
    RETURN_IF_ERROR(ReadGpu(kMemsetTable, GpuActivityKind::kMemset));
    return std::move(trace_);
  }

 private:
  // The shift from the capture clock to epoch nanoseconds, when known.
  absl::Status ReadTimeOffset() {
    if (!tables_.contains(kSessionStartTable)) return absl::OkStatus();
    ASSIGN_OR_RETURN(auto columns, db_->ColumnNames(kSessionStartTable));
    if (!columns.contains("utcEpochNs") || !columns.contains("systemClockNs")) {
      return absl::OkStatus();
    }
    if (tables_.contains("META_DATA_EXPORT")) {
      ASSIGN_OR_RETURN(SqliteStatement normalized,
                       db_->Prepare("SELECT value FROM META_DATA_EXPORT WHERE "
                                    "name = 'EXPORT_PARAM_TIME_NORMALIZE'"));
      ASSIGN_OR_RETURN(bool row, normalized.Step());
      if (row && normalized.Text(0) == "true") return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(
        SqliteStatement start,
        db_->Prepare(absl::StrCat("SELECT utcEpochNs, systemClockNs FROM ",
                                  kSessionStartTable)));
    ASSIGN_OR_RETURN(bool row, start.Step());
    if (!row || start.IsNull(0) || start.IsNull(1)) return absl::OkStatus();
    if (__builtin_sub_overflow(start.Int64(0), start.Int64(1), &offset_ns_)) {
      offset_ns_ = 0;
    }
    return absl::OkStatus();
  }

  // Reads start and end of row `index` of `table`, shifted to epoch time.
  absl::Status Times(const SqliteStatement& row, int start_column,
                     absl::string_view table, int64_t index, int64_t* start,
                     int64_t* end) {
    if (row.IsNull(start_column) || row.IsNull(start_column + 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(table, " row ", index, ": start or end is NULL"));
    }
    *start = row.Int64(start_column);
    *end = row.Int64(start_column + 1);
    if (*end < *start) {
      return absl::InvalidArgumentError(
          absl::StrCat(table, " row ", index, ": end ", *end,
                       " ns is before start ", *start, " ns"));
    }
    if (__builtin_add_overflow(*start, offset_ns_, start) ||
        __builtin_add_overflow(*end, offset_ns_, end)) {
      return absl::InvalidArgumentError(absl::StrCat(
          table, " row ", index,
          ": time plus the session's epoch offset does not fit in 64 bits"));
    }
    return absl::OkStatus();
  }

  // Steps through `SELECT columns FROM table`, calling `on_row(row, index)`.
  template <typename OnRow>
  absl::Status ForEachRow(absl::string_view table,
                          absl::Span<const absl::string_view> columns,
                          absl::string_view where, OnRow on_row) {
    if (!tables_.contains(table)) return absl::OkStatus();
    ASSIGN_OR_RETURN(auto have, db_->ColumnNames(table));
    ASSIGN_OR_RETURN(std::string sql, SelectSql(table, have, columns));
    ASSIGN_OR_RETURN(SqliteStatement row,
                     db_->Prepare(absl::StrCat(sql, where)));
    for (int64_t index = 0;; ++index) {
      ASSIGN_OR_RETURN(bool more, row.Step());
      if (!more) break;
      RETURN_IF_ERROR(on_row(row, index));
    }
    return absl::OkStatus();
  }

  absl::Status ReadApiCalls(absl::string_view table,
                            CpuEventCategory category) {
    return ForEachRow(
        table, kApiColumns, "",
        [&](const SqliteStatement& row, int64_t index) -> absl::Status {
          CpuEvent e;
          RETURN_IF_ERROR(
              Times(row, kApiStart, table, index, &e.start_ns, &e.end_ns));
          int64_t tid = row.IsNull(kApiTid) ? 0 : row.Int64(kApiTid);
          uint32_t process = ProcessOf(tid);
          api_processes_.insert(process);
          e.thread = static_cast<uint64_t>(tid);
          e.correlation = Fold(process, row.Int64(kApiCorrelation));
          ASSIGN_OR_RETURN(e.name, NameFrom(row, kApiName));
          e.category = category;
          trace_.cpu.push_back(e);
          return absl::OkStatus();
        });
  }

  absl::Status ReadNvtx() {
    if (!tables_.contains(kNvtxTable)) return absl::OkStatus();
    ASSIGN_OR_RETURN(auto have, db_->ColumnNames(kNvtxTable));
    if (have.contains("end")) {
      ASSIGN_OR_RETURN(
          SqliteStatement marks,
          db_->Prepare(absl::StrCat("SELECT COUNT(*) FROM ", kNvtxTable,
                                    " WHERE \"end\" IS NULL")));
      ASSIGN_OR_RETURN(bool row, marks.Step());
      if (row && marks.Int64(0) > 0) {
        trace_.skipped["NVTX event without end (mark or registration)"] +=
            marks.Int64(0);
      }
    }
    return ForEachRow(
        kNvtxTable, kNvtxColumns, " WHERE \"end\" IS NOT NULL",
        [&](const SqliteStatement& row, int64_t index) -> absl::Status {
          CpuEvent e;
          RETURN_IF_ERROR(Times(row, kNvtxStart, kNvtxTable, index, &e.start_ns,
                                &e.end_ns));
          e.thread = static_cast<uint64_t>(row.Int64(kNvtxTid));
          if (!row.IsNull(kNvtxText)) {
            e.name = names_.Intern(row.Text(kNvtxText));
          } else {
            ASSIGN_OR_RETURN(e.name, NameFrom(row, kNvtxTextId));
          }
          e.category = CpuEventCategory::kUserAnnotation;
          trace_.cpu.push_back(e);
          return absl::OkStatus();
        });
  }

  absl::Status ReadGpu(absl::string_view table, GpuActivityKind kind) {
    int64_t uncorrelated = 0;
    absl::Status status = ForEachRow(
        table, kGpuColumns, "",
        [&](const SqliteStatement& row, int64_t index) -> absl::Status {
          GpuActivity a;
          RETURN_IF_ERROR(
              Times(row, kGpuStart, table, index, &a.start_ns, &a.end_ns));
          a.kind = kind;
          a.device = static_cast<int32_t>(row.Int64(kGpuDevice));
          a.stream = static_cast<int32_t>(row.Int64(kGpuStream));
          a.bytes = static_cast<uint64_t>(row.Int64(kGpuBytes));
          int64_t correlation = row.Int64(kGpuCorrelation);
          if (!row.IsNull(kGpuPid)) {
            a.correlation = Fold(ProcessOf(row.Int64(kGpuPid)), correlation);
          } else if (api_processes_.size() <= 1) {
            uint32_t process =
                api_processes_.empty() ? 0 : *api_processes_.begin();
            a.correlation = Fold(process, correlation);
          } else if (correlation != 0) {
            ++uncorrelated;
          }
          ASSIGN_OR_RETURN(a.name, GpuName(row, kind));
          a.pageable =
              kind == GpuActivityKind::kMemcpy &&
              ((!row.IsNull(kGpuSrcKind) && row.Int64(kGpuSrcKind) == 0) ||
               (!row.IsNull(kGpuDstKind) && row.Int64(kGpuDstKind) == 0));
          trace_.gpu.push_back(a);
          if (kind == GpuActivityKind::kKernel &&
              IsCollectiveKernelName(trace_.Name(a.name))) {
            AddCollective(a);
          }
          return absl::OkStatus();
        });
    if (uncorrelated > 0) {
      trace_.skipped[absl::StrCat(
          "correlation unknown: ", table,
          " has no globalPid and several processes made CUDA calls")] +=
          uncorrelated;
    }
    return status;
  }

  // A collective kernel's record: what the kernel row says, nothing more.
  // (Exports with NCCL operation tables, nsys >= 2025.6 with NCCL >= 2.28,
  // could give the communicator and sequence number; not read yet.)
  void AddCollective(const GpuActivity& kernel) {
    CollectiveKernel& c = trace_.collectives.emplace_back();
    c.start_ns = kernel.start_ns;
    c.end_ns = kernel.end_ns;
    c.device = kernel.device;
    c.stream = kernel.stream;
    c.kernel_name = kernel.name;
  }

  absl::StatusOr<NameId> GpuName(const SqliteStatement& row,
                                 GpuActivityKind kind) {
    if (kind == GpuActivityKind::kKernel) {
      for (int column : {kGpuShortName, kGpuDemangledName, kGpuMangledName}) {
        if (!row.IsNull(column)) return NameFrom(row, column);
      }
      return names_.Intern("");
    }
    auto value = [&row](int column) -> int64_t {
      return row.IsNull(column) ? -1 : row.Int64(column);
    };
    auto key = std::make_tuple(kind, value(kGpuCopyKind), value(kGpuSrcKind),
                               value(kGpuDstKind), value(kGpuMemKind));
    auto it = copy_names_.find(key);
    if (it != copy_names_.end()) return it->second;
    std::string name;
    if (kind == GpuActivityKind::kMemcpy) {
      name = "Memcpy";
      absl::string_view copy = CopyKindName(std::get<1>(key));
      if (!copy.empty()) absl::StrAppend(&name, " ", copy);
      if (std::get<2>(key) >= 0 && std::get<3>(key) >= 0) {
        absl::StrAppend(&name, " (", MemKindName(std::get<2>(key)), " -> ",
                        MemKindName(std::get<3>(key)), ")");
      }
    } else {
      name = "Memset";
      if (std::get<4>(key) >= 0) {
        absl::StrAppend(&name, " (", MemKindName(std::get<4>(key)), ")");
      }
    }
    NameId id = names_.Intern(name);
    copy_names_.emplace(key, id);
    return id;
  }

  // The name in `column`: an id into StringIds, or (some exports) the text.
  absl::StatusOr<NameId> NameFrom(const SqliteStatement& row, int column) {
    if (row.IsNull(column)) return names_.Intern("");
    if (row.Type(column) == SQLITE_TEXT) return names_.Intern(row.Text(column));
    int64_t id = row.Int64(column);
    auto it = string_names_.find(id);
    if (it != string_names_.end()) return it->second;
    if (!string_lookup_) {
      ASSIGN_OR_RETURN(
          string_lookup_,
          db_->Prepare("SELECT value FROM StringIds WHERE id = ?1"));
    }
    string_lookup_->Reset();
    RETURN_IF_ERROR(string_lookup_->BindInt64(1, id));
    ASSIGN_OR_RETURN(bool found, string_lookup_->Step());
    NameId name = found ? names_.Intern(string_lookup_->Text(0))
                        : names_.Intern(absl::StrCat("StringIds#", id));
    string_names_.emplace(id, name);
    return name;
  }

  SqliteDb* db_;
  absl::flat_hash_set<std::string> tables_;
  Trace trace_;
  NameInterner names_;
  int64_t offset_ns_ = 0;
  // Processes seen in RUNTIME/DRIVER, for GPU tables without globalPid.
  absl::flat_hash_set<uint32_t> api_processes_;
  std::optional<SqliteStatement> string_lookup_;
  absl::flat_hash_map<int64_t, NameId> string_names_;
  absl::flat_hash_map<
      std::tuple<GpuActivityKind, int64_t, int64_t, int64_t, int64_t>, NameId>
      copy_names_;
};

}  // namespace

absl::StatusOr<Trace> ReadNsysExport(absl::string_view path) {
  absl::StatusOr<SqliteDb> db = SqliteDb::Open(path);
  if (!db.ok()) {
    if (absl::IsInvalidArgument(db.status())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not an Nsight Systems export: ", db.status().message()));
    }
    return db.status();
  }
  absl::StatusOr<absl::flat_hash_set<std::string>> tables = db->TableNames();
  if (!tables.ok()) {
    // SQLITE_NOTADB past a valid header, e.g. a damaged first page.
    if (absl::IsInvalidArgument(tables.status())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not an Nsight Systems export: ", tables.status().message()));
    }
    return tables.status();
  }
  for (absl::string_view required : {kKernelTable, kStringsTable}) {
    if (!tables->contains(required)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not an Nsight Systems export: table ", required, " is missing"));
    }
  }
  NsysReader reader(&*db, *std::move(tables));
  return reader.Read();
}

}  // namespace bubblewatch
