// ThreadPool: a fixed set of worker threads for compiling kernels and running CPU loops in parallel.
//
//   std::future<int> answer = default_pool().submit([] { return 6 * 7; });   // exceptions come out of get()
//   default_pool().parallel_for(0, n, [&](int64_t lo, int64_t hi) {
//     for (int64_t i = lo; i < hi; ++i) out[i] = f(in[i]);
//   }, /*grain=*/1024);
//
// parallel_for may be called from anywhere, including from inside a pool task. Blocking on a future
// inside a pool task is not safe in general (every worker could end up waiting), so nest with
// parallel_for, never with submit(...).get().
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kiln {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads = std::thread::hardware_concurrency());  // at least 1 worker
  ~ThreadPool();  // finishes every queued task, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()); }

  template <class F>
  auto submit(F&& f) -> std::future<std::invoke_result_t<F>> {
    // packaged_task stores f's result or exception in the future; shared_ptr because std::function
    // needs a copyable callable and packaged_task is move-only.
    using Result = std::invoke_result_t<F>;
    auto task = std::make_shared<std::packaged_task<Result()>>(std::forward<F>(f));
    std::future<Result> result = task->get_future();
    enqueue([task] { (*task)(); });
    return result;
  }

  // Calls body(lo, hi) on contiguous chunks covering [begin, end), each at least `grain` long except the
  // last, on the workers and the calling thread; returns when all are done. If a chunk throws, chunks
  // not yet started are skipped and the first exception is rethrown once no chunk is running.
  // Called from one of this pool's workers, it runs body(begin, end) inline.
  void parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& body,
                    int64_t grain = 1);

 private:
  void enqueue(std::function<void()> job);  // job must not throw
  void work();

  std::vector<std::thread> workers_;
  std::deque<std::function<void()>> queue_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

// The process-wide pool, sized to the hardware.
ThreadPool& default_pool();

}  // namespace kiln
