#include "uop/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>

namespace kiln {
namespace {

thread_local const ThreadPool* worker_of = nullptr;  // the pool whose worker this thread is, if any

// One parallel_for call, shared with the helper jobs it queued. Threads claim chunks from `next`, so the
// caller can finish everything itself when every worker is busy: that is why nesting cannot deadlock.
// Helpers that start after the call returned find no chunk left and never touch `body`.
struct ParallelFor {
  const std::function<void(int64_t, int64_t)>* body;
  int64_t begin, end, chunk, chunks;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::condition_variable all_done;
  int64_t done = 0;           // guarded by mutex
  std::exception_ptr error;   // guarded by mutex; the first exception a chunk threw

  void run_chunks() {
    for (;;) {
      int64_t i = next.fetch_add(1);
      if (i >= chunks) return;
      std::exception_ptr thrown;
      if (!failed.load()) {
        int64_t lo = begin + i * chunk;
        try {
          (*body)(lo, lo + std::min(chunk, end - lo));
        } catch (...) {
          thrown = std::current_exception();
          failed = true;
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (thrown && !error) error = thrown;
      if (++done == chunks) all_done.notify_all();
    }
  }
};

}  // namespace

ThreadPool::ThreadPool(unsigned threads) {
  threads = std::max(threads, 1u);  // hardware_concurrency() may return 0 when it cannot tell
  workers_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

// Workers leave only once stopping and the queue is empty, so the destructor drains queued tasks, including
// ones that running tasks queue while it waits.
void ThreadPool::work() {
  worker_of = this;
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    job();
  }
}

void ThreadPool::parallel_for(int64_t begin, int64_t end, const std::function<void(int64_t, int64_t)>& body,
                              int64_t grain) {
  if (end <= begin) return;
  // About four chunks per thread (workers plus caller) balances uneven chunks without much overhead.
  int64_t n = end - begin, threads = size() + 1;
  int64_t chunk = std::max({grain, int64_t(1), 1 + (n - 1) / (4 * threads)});
  int64_t chunks = 1 + (n - 1) / chunk;
  // Nested in one of our workers, that worker already is the parallelism; queueing more could only wait.
  if (chunks == 1 || worker_of == this) {
    body(begin, end);
    return;
  }

  auto state = std::make_shared<ParallelFor>();
  state->body = &body;
  state->begin = begin;
  state->end = end;
  state->chunk = chunk;
  state->chunks = chunks;
  int64_t helpers = std::min<int64_t>(size(), chunks - 1);
  for (int64_t i = 0; i < helpers; ++i) enqueue([state] { state->run_chunks(); });
  state->run_chunks();

  std::unique_lock<std::mutex> lock(state->mutex);
  state->all_done.wait(lock, [&] { return state->done == state->chunks; });
  if (state->error) std::rethrow_exception(state->error);
}

ThreadPool& default_pool() {
  static ThreadPool pool;  // the default argument sizes it to hardware_concurrency()
  return pool;
}

}  // namespace kiln
