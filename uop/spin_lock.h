// SpinLock: a lock for critical sections of a few dozen instructions taken on hot paths (the interning
// table's shards, the list of live tensors): every node and every tensor made takes one twice (made,
// destroyed), ~1000 times per call of a 200-op graph rebuilt eagerly.
//
// Uncontended it costs one atomic exchange to take and a plain store to release, where std::mutex pays
// a locked instruction both ways and a call into pthreads. A waiter spins on a plain load and yields to
// the holder rather than sleeping; never hold one across an allocation-heavy or blocking call.
// Meets BasicLockable, so std::lock_guard<SpinLock> works; ThreadSanitizer sees the atomics.
#pragma once

#include <atomic>
#include <thread>

namespace kiln {

class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire))
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace kiln
