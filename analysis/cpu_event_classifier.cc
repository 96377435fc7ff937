#include "analysis/cpu_event_classifier.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace bubblewatch {
namespace {

bool IsWordChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// `aten::item\b`: "aten::item" not followed by a word character.
bool ContainsAtenItem(absl::string_view name) {
  constexpr absl::string_view kNeedle = "aten::item";
  for (size_t pos = name.find(kNeedle); pos != absl::string_view::npos;
       pos = name.find(kNeedle, pos + 1)) {
    size_t after = pos + kNeedle.size();
    if (after == name.size() || !IsWordChar(name[after])) return true;
  }
  return false;
}

bool IsSync(absl::string_view name) {
  return absl::StrContains(name, "Synchronize") || ContainsAtenItem(name) ||
         absl::StrContains(name, "_local_scalar_dense") ||
         absl::StrContains(name, ".item()") || name == "cudaMemcpy" ||
         name == "cuMemcpyDtoH" || name == "cuMemcpyDtoH_v2";
}

bool IsAllocator(absl::string_view name) {
  for (absl::string_view needle :
       {"cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "empty_cache",
        "cudaHostAlloc", "cuMemHostAlloc"}) {
    if (absl::StrContains(name, needle)) return true;
  }
  return false;
}

bool IsCudaApiName(absl::string_view name) {
  if (absl::StartsWith(name, "cuda")) return true;
  return name.size() > 2 && name[0] == 'c' && name[1] == 'u' &&
         std::isupper(static_cast<unsigned char>(name[2]));
}

}  // namespace

BubbleCause HostClassCause(HostClass host_class) {
  switch (host_class) {
    case HostClass::kSync:
      return BubbleCause::kHostSync;
    case HostClass::kAllocator:
      return BubbleCause::kAllocator;
    case HostClass::kDataLoading:
      return BubbleCause::kDataLoading;
    case HostClass::kLaunch:
      return BubbleCause::kLaunchOverhead;
    case HostClass::kContext:
      return BubbleCause::kHostCompute;
  }
  return BubbleCause::kHostCompute;
}

absl::string_view StripApiVersionSuffix(absl::string_view name) {
  // Trailing "_v" followed by one or more digits.
  size_t digits = 0;
  while (digits < name.size() && std::isdigit(static_cast<unsigned char>(
                                     name[name.size() - 1 - digits]))) {
    ++digits;
  }
  if (digits == 0 || name.size() < digits + 2) return name;
  size_t v = name.size() - digits - 1;
  // Keep "_v2": a suffix needs a name in front of it.
  if (v >= 2 && name[v] == 'v' && name[v - 1] == '_') {
    return name.substr(0, v - 1);
  }
  return name;
}

HostClass ClassifyCpuEvent(absl::string_view raw_name,
                           CpuEventCategory category) {
  absl::string_view name = StripApiVersionSuffix(raw_name);
  if (IsSync(name)) return HostClass::kSync;
  if (IsAllocator(name)) return HostClass::kAllocator;
  if (absl::StrContains(absl::AsciiStrToLower(name), "dataloader")) {
    return HostClass::kDataLoading;
  }
  if (IsCudaApiName(name) || category == CpuEventCategory::kCudaRuntime ||
      category == CpuEventCategory::kCudaDriver) {
    return HostClass::kLaunch;
  }
  return HostClass::kContext;
}

}  // namespace bubblewatch
