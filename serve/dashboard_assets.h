// The dashboard's static files (serve/dashboard/), built into the binary at
// build time (serve/dashboard/embed_assets.cmake writes them as byte arrays),
// so `bubblewatch serve` needs nothing installed beside it. Lookup is by
// exact name in that fixed table: no file system access, hence no path
// traversal.
#ifndef BUBBLEWATCH_SERVE_DASHBOARD_ASSETS_H_
#define BUBBLEWATCH_SERVE_DASHBOARD_ASSETS_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace bubblewatch {

struct DashboardAsset {
  absl::string_view path;  // Relative to serve/dashboard/, e.g. "app.js".
  absl::string_view content_type;
  absl::string_view data;
};

// Returns the file at `path` ("index.html", "vendor/chart.umd.min.js"; no
// leading slash), or nullptr when there is none.
const DashboardAsset* FindDashboardAsset(absl::string_view path);

namespace internal {
// Defined in the generated dashboard_files.cc.
struct EmbeddedFile {
  const char* path;
  const char* data;
  size_t size;
};
extern const EmbeddedFile kDashboardFiles[];
extern const size_t kDashboardFileCount;
}  // namespace internal

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_SERVE_DASHBOARD_ASSETS_H_
