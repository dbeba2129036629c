#pragma once
// How the process asks glibc's malloc to treat freed memory.

#include <cstddef>

namespace fencegate::proxy {

// glibc gives the free memory at the top of a heap back to the kernel as
// soon as more of it than M_TRIM_THRESHOLD (128 KiB unless set) is free
// there. A body of 64 KiB borrows buffers of that size for one request, so
// under concurrent load, with that default, the heap top goes back and
// forth: every request returns its buffers to the kernel and faults them in
// again, zeroed (docs/performance.md: 2-7 minor faults and about 2x the CPU
// per 64 KiB PUT at 16-256 connections). Above this threshold the top is
// still given back: memory that is free after a burst of large requests stays
// at most this much per heap (glibc keeps one heap per arena).
inline constexpr std::size_t kHeapTrimThreshold = std::size_t{16} << 20;

// Sets M_TRIM_THRESHOLD to kHeapTrimThreshold, unless GLIBC_TUNABLES sets
// glibc.malloc.trim_threshold (the operator's choice stands). Setting it
// also freezes glibc's mmap threshold at its start value (128 KiB), which
// no request buffer reaches. Call once, first thing in main(), before any
// thread starts (getenv and mallopt are not thread-safe). Returns
// whether it set the threshold.
bool KeepFreedHeapMemory();

}  // namespace fencegate::proxy
