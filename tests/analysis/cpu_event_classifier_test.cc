#include "analysis/cpu_event_classifier.h"

#include "gtest/gtest.h"

namespace bubblewatch {
namespace {

HostClass Classify(absl::string_view name,
                   CpuEventCategory c = CpuEventCategory::kCpuOp) {
  return ClassifyCpuEvent(name, c);
}

TEST(CpuEventClassifier, SyncNamesFromTheBrief) {
  EXPECT_EQ(Classify("cudaStreamSynchronize"), HostClass::kSync);
  EXPECT_EQ(Classify("cudaStreamSynchronize_v3020"), HostClass::kSync);
  EXPECT_EQ(Classify("cudaDeviceSynchronize"), HostClass::kSync);
  EXPECT_EQ(Classify("aten::item"), HostClass::kSync);
  EXPECT_EQ(Classify("aten::_local_scalar_dense"), HostClass::kSync);
  EXPECT_EQ(Classify("tensor.item()_sync"), HostClass::kSync);
  EXPECT_EQ(Classify("cudaMemcpy"), HostClass::kSync);
  EXPECT_EQ(Classify("cudaMemcpy_v3020"), HostClass::kSync);
  EXPECT_EQ(Classify("cuMemcpyDtoH_v2"), HostClass::kSync);
}

TEST(CpuEventClassifier, AtenItemNeedsAWordBoundary) {
  EXPECT_EQ(Classify("aten::items"), HostClass::kContext);
  EXPECT_EQ(Classify("aten::item_foo"), HostClass::kContext);
  EXPECT_EQ(Classify("aten::item (x)"), HostClass::kSync);
}

TEST(CpuEventClassifier, AsyncCopiesAreLaunchesNotSyncs) {
  EXPECT_EQ(Classify("cudaMemcpyAsync", CpuEventCategory::kCudaRuntime),
            HostClass::kLaunch);
  EXPECT_EQ(Classify("cudaMemcpyAsync_v3020", CpuEventCategory::kOther),
            HostClass::kLaunch);
}

TEST(CpuEventClassifier, AllocatorNames) {
  EXPECT_EQ(Classify("cudaMalloc"), HostClass::kAllocator);
  EXPECT_EQ(Classify("cudaFree_v3020"), HostClass::kAllocator);
  EXPECT_EQ(Classify("cuMemAlloc_v2"), HostClass::kAllocator);
  EXPECT_EQ(Classify("torch.cuda.empty_cache"), HostClass::kAllocator);
  EXPECT_EQ(Classify("cudaHostAlloc"), HostClass::kAllocator);
}

TEST(CpuEventClassifier, DataLoaderInAnyCase) {
  EXPECT_EQ(Classify("enumerate(DataLoader)#_MultiProcessingDataLoaderIter"),
            HostClass::kDataLoading);
  EXPECT_EQ(Classify("torch/utils/data/dataloader.py(631): __next__"),
            HostClass::kDataLoading);
}

TEST(CpuEventClassifier, OtherCudaCallsAreLaunchOverhead) {
  EXPECT_EQ(Classify("cudaLaunchKernel_v7000"), HostClass::kLaunch);
  EXPECT_EQ(Classify("cuLaunchKernel"), HostClass::kLaunch);
  EXPECT_EQ(Classify("cudaEventQuery"), HostClass::kLaunch);
  EXPECT_EQ(Classify("curand_thing"), HostClass::kContext);
  EXPECT_EQ(Classify("launch", CpuEventCategory::kCudaDriver),
            HostClass::kLaunch);
}

TEST(CpuEventClassifier, FrameworkOpsAreContext) {
  EXPECT_EQ(Classify("aten::add"), HostClass::kContext);
  EXPECT_EQ(Classify("ProfilerStep#5"), HostClass::kContext);
}

TEST(CpuEventClassifier, StripsOnlyVersionSuffixes) {
  EXPECT_EQ(StripApiVersionSuffix("cudaLaunchKernel_v7000"),
            "cudaLaunchKernel");
  EXPECT_EQ(StripApiVersionSuffix("cudaLaunchKernel"), "cudaLaunchKernel");
  EXPECT_EQ(StripApiVersionSuffix("layer_v"), "layer_v");
  EXPECT_EQ(StripApiVersionSuffix("_v2"), "_v2");
  EXPECT_EQ(StripApiVersionSuffix("conv_v12x"), "conv_v12x");
}

}  // namespace
}  // namespace bubblewatch
