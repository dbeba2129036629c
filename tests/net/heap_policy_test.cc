// The binary's heap policy (net/heap_policy.h): request-sized buffers
// freed at the top of the heap are kept for the next request, not handed
// back to the kernel and faulted in again. Counted with the process's own
// minor page faults, so each test runs in a process of its own (ctest runs
// every test alone).
#include "net/heap_policy.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace fencegate::proxy {
namespace {

// A sanitizer's allocator is not glibc's: it ignores mallopt and keeps
// freed memory in quarantine. GCC says so with __SANITIZE_*__, clang with
// __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FENCEGATE_SANITIZED_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define FENCEGATE_SANITIZED_HEAP 1
#endif
#endif
#ifdef FENCEGATE_SANITIZED_HEAP
constexpr bool kSanitizedHeap = true;
#else
constexpr bool kSanitizedHeap = false;
#endif

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// What a burst of requests with 64 KiB bodies does to the heap: a body
// buffer and a read buffer each, all freed when the requests end. Returns
// the minor faults of one such burst.
long BurstOfLargeRequests(int requests) {
  constexpr std::size_t kBuffer = std::size_t{64} << 10;
  std::vector<char*> buffers;
  const long before = MinorFaults();
  for (int i = 0; i < 2 * requests; ++i) {
    auto* p = static_cast<char*>(std::malloc(kBuffer));
    std::memset(p, i, kBuffer);  // every page touched, as a body fills it
    buffers.push_back(p);
  }
  for (char* p : buffers) std::free(p);
  return MinorFaults() - before;
}

TEST(HeapPolicyTest, BuffersOfOneBurstAreReusedByTheNextWithoutFaults) {
  if (kSanitizedHeap) GTEST_SKIP() << "a sanitizer's allocator ignores mallopt";
  ASSERT_TRUE(KeepFreedHeapMemory());
  BurstOfLargeRequests(16);  // grows the heap: these faults are expected
  long faults = 0;
  for (int i = 0; i < 10; ++i) faults += BurstOfLargeRequests(16);
  // Under glibc's default each burst hands what it freed back to the
  // kernel and the next one faults it in again: about 2,000 faults over
  // these 10 bursts here. Kept, the next bursts fault almost none.
  EXPECT_LT(faults, 100) << "freed request buffers went back to the kernel";
}

TEST(HeapPolicyTest, AnOperatorsTunableWins) {
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072", 1), 0);
  EXPECT_FALSE(KeepFreedHeapMemory());
  ASSERT_EQ(unsetenv("GLIBC_TUNABLES"), 0);
}

}  // namespace
}  // namespace fencegate::proxy
