#include "serve/dashboard_assets.h"

#include <vector>

#include "absl/strings/match.h"

namespace bubblewatch {
namespace {

absl::string_view ContentType(absl::string_view path) {
  if (absl::EndsWith(path, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(path, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(path, ".css")) return "text/css; charset=utf-8";
  return "text/plain; charset=utf-8";
}

const std::vector<DashboardAsset>& Assets() {
  static const auto* assets = [] {
    auto* v = new std::vector<DashboardAsset>();
    for (size_t i = 0; i < internal::kDashboardFileCount; ++i) {
      const internal::EmbeddedFile& f = internal::kDashboardFiles[i];
      v->push_back(DashboardAsset{.path = f.path,
                                  .content_type = ContentType(f.path),
                                  .data = absl::string_view(f.data, f.size)});
    }
    return v;
  }();
  return *assets;
}

}  // namespace

const DashboardAsset* FindDashboardAsset(absl::string_view path) {
  for (const DashboardAsset& a : Assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

}  // namespace bubblewatch
