#include "analysis/device_timeline.h"

#include <algorithm>

#include "base/check.h"

namespace bubblewatch {
namespace {

bool StartsBefore(const KernelSlot& a, const KernelSlot& b) {
  return a.start_ns < b.start_ns;
}

// True if `a` is a better culprit than `b`: it ended later; then started
// later; then has the smaller name; then the lower stream.
bool BetterCulprit(const KernelSlot& a, const KernelSlot& b,
                   const Trace& trace) {
  if (a.end_ns != b.end_ns) return a.end_ns > b.end_ns;
  if (a.start_ns != b.start_ns) return a.start_ns > b.start_ns;
  const GpuActivity& ka = trace.gpu[a.index];
  const GpuActivity& kb = trace.gpu[b.index];
  if (ka.name != kb.name) return trace.names[ka.name] < trace.names[kb.name];
  return ka.stream < kb.stream;
}

// Merges the sorted ranges [first, mid) and [mid, last) through `buffer`
// (which receives a copy of the first): stable, like std::inplace_merge, but
// without a temporary buffer allocated per call.
void MergeRuns(KernelSlot* first, KernelSlot* mid, KernelSlot* last,
               std::vector<KernelSlot>& buffer) {
  if (first == mid || mid == last || !StartsBefore(*mid, *(mid - 1))) return;
  const size_t left = static_cast<size_t>(mid - first);
  if (buffer.size() < left) buffer.resize(left);
  std::copy(first, mid, buffer.data());
  // Forward merge; the output never overtakes the unread part of
  // [mid, last). Branch-free selection: streams interleave at random, so a
  // branch on the comparison would be mispredicted half the time. Ties take
  // the left run first (stable).
  const KernelSlot* a = buffer.data();
  const KernelSlot* const a_end = a + left;
  const KernelSlot* b = mid;
  KernelSlot* out = first;
  while (a != a_end && b != last) {
    const bool take_b = b->start_ns < a->start_ns;
    *out++ = *(take_b ? b : a);
    b += take_b;
    a += !take_b;
  }
  std::copy(a, a_end, out);  // The rest of [b, last) is already in place.
}

}  // namespace

void SortKernelsByStart(std::vector<KernelSlot>& kernels,
                        std::vector<KernelSlot>* scratch) {
  std::vector<size_t> run_starts = {0};
  for (size_t i = 1; i < kernels.size(); ++i) {
    if (StartsBefore(kernels[i], kernels[i - 1])) {
      run_starts.push_back(i);
      // Many runs: the input is not stream-ordered; sort outright.
      if (run_starts.size() > 64) {
        std::sort(kernels.begin(), kernels.end(), StartsBefore);
        return;
      }
    }
  }
  // Bottom-up pairwise merging of the runs: O(n log runs). (A k-way merge
  // into a new array measured slower: one more full-size allocation.)
  std::vector<KernelSlot> local;
  std::vector<KernelSlot>& buffer = scratch != nullptr ? *scratch : local;
  run_starts.push_back(kernels.size());
  while (run_starts.size() > 2) {
    std::vector<size_t> merged = {0};
    for (size_t r = 0; r + 2 < run_starts.size(); r += 2) {
      MergeRuns(kernels.data() + run_starts[r],
                kernels.data() + run_starts[r + 1],
                kernels.data() + run_starts[r + 2], buffer);
      merged.push_back(run_starts[r + 2]);
    }
    if ((run_starts.size() - 1) % 2 == 1) merged.push_back(run_starts.back());
    run_starts = std::move(merged);
  }
  // What DeviceTimeline's sweep assumes; a pass over the kernels, so debug
  // builds only.
  BW_DCHECK(std::is_sorted(kernels.begin(), kernels.end(), StartsBefore));
}

DeviceTimeline::DeviceTimeline(std::vector<KernelSlot> kernels,
                               const Trace& trace,
                               std::optional<EventNs> open_until_ns,
                               std::vector<KernelSlot>* scratch)
    : kernels_(std::move(kernels)) {
  SortKernelsByStart(kernels_, scratch);
  if (kernels_.empty()) return;
  // At most one busy interval and one gap per kernel (plus a trailing gap).
  // Reserving that bound costs address space only: pages never written are
  // never faulted in, while growing by doubling copies and touches ~2x.
  busy_.reserve(kernels_.size());
  gaps_.reserve(kernels_.size());
  // A plain pointer and size: the appends below would otherwise make the
  // compiler reload them for every kernel.
  const KernelSlot* const kernels_at = kernels_.data();
  const size_t n = kernels_.size();
  int64_t cur_start = kernels_at[0].start_ns;
  int64_t cur_end = kernels_at[0].end_ns;
  size_t culprit = 0;
  for (size_t i = 1; i < n; ++i) {
    const KernelSlot& k = kernels_at[i];
    if (k.start_ns > cur_end) {
      busy_.push_back({cur_start, cur_end});
      compute_ns_ += cur_end - cur_start;
      size_t next_end = i + 1;
      while (next_end < n && kernels_at[next_end].start_ns == k.start_ns) {
        ++next_end;
      }
      gaps_.push_back(Gap{cur_end, k.start_ns, kernels_at[culprit].index,
                          static_cast<uint32_t>(i),
                          static_cast<uint32_t>(next_end)});
      cur_start = k.start_ns;
      cur_end = k.end_ns;
      culprit = i;
      continue;
    }
    if (k.end_ns > cur_end) cur_end = k.end_ns;
    if (BetterCulprit(k, kernels_at[culprit], trace)) culprit = i;
  }
  busy_.push_back({cur_start, cur_end});
  compute_ns_ += cur_end - cur_start;
  if (open_until_ns && *open_until_ns > cur_end) {
    uint32_t none = static_cast<uint32_t>(kernels_.size());
    gaps_.push_back(
        Gap{cur_end, *open_until_ns, kernels_[culprit].index, none, none});
  }
}

}  // namespace bubblewatch
