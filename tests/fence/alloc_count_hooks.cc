// The global operator new and delete of fence_alloc_tests, counting the
// allocations of each thread (alloc_count_test.cc). In a file of their own,
// so that the compiler never sees a delete's free() next to a new.

#include <cstdlib>
#include <new>

namespace fencegate::testing {
namespace {
thread_local long allocations = 0;
}  // namespace

long AllocationsOnThisThread() { return allocations; }

}  // namespace fencegate::testing

void* operator new(std::size_t size) {
  ++fencegate::testing::allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
