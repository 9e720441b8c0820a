#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "uop/thread_pool.h"

using namespace kiln;

namespace {

// Runs parallel_for and checks its contract: each index once, every chunk non-empty and inside the range,
// at most one chunk (the last) shorter than the grain.
void check_parallel_for(ThreadPool& pool, int64_t begin, int64_t end, int64_t grain) {
  INFO("pool of " << pool.size() << ", [" << begin << ", " << end << "), grain " << grain);
  int64_t n = std::max<int64_t>(end - begin, 0);
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  std::atomic<int> bad_chunks{0}, short_chunks{0};
  pool.parallel_for(begin, end, [&](int64_t lo, int64_t hi) {
    if (lo < begin || hi > end || lo >= hi) {
      ++bad_chunks;
      return;
    }
    if (hi - lo < grain) ++short_chunks;
    for (int64_t i = lo; i < hi; ++i) ++visits[size_t(i - begin)];
  }, grain);
  CHECK(bad_chunks == 0);
  CHECK(short_chunks <= 1);
  int64_t wrong = 0;
  for (auto& v : visits) wrong += v != 1;
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("thread_pool: has at least one worker", "[thread_pool]") {
  CHECK(ThreadPool(0).size() == 1);
  CHECK(ThreadPool(3).size() == 3);
  CHECK(default_pool().size() >= 1);
}

TEST_CASE("thread_pool: submit returns the task's result", "[thread_pool]") {
  ThreadPool pool(2);
  std::future<int> answer = pool.submit([] { return 6 * 7; });
  std::future<void> nothing = pool.submit([] {});
  CHECK(answer.get() == 42);
  nothing.get();
}

TEST_CASE("thread_pool: parallel_for visits every index exactly once", "[thread_pool]") {
  ThreadPool one(1), three(3);
  for (ThreadPool* pool : {&one, &three, &default_pool()})
    for (int64_t begin : {-5, 0, 3})
      for (int64_t size : {-2, 0, 1, 2, 7, 100, 1000, 4097})
        for (int64_t grain : {-1, 1, 3, 64, 10000}) check_parallel_for(*pool, begin, begin + size, grain);
}

TEST_CASE("thread_pool: an empty range never calls the body", "[thread_pool]") {
  ThreadPool pool(2);
  int calls = 0;
  pool.parallel_for(5, 5, [&](int64_t, int64_t) { ++calls; });
  pool.parallel_for(5, 2, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE("thread_pool: an exception in a task comes out of its future", "[thread_pool]") {
  ThreadPool pool(2);
  std::future<int> failing = pool.submit([]() -> int { throw std::runtime_error("task failed"); });
  CHECK_THROWS_WITH(failing.get(), "task failed");
  CHECK(pool.submit([] { return 1; }).get() == 1);  // the worker survived
}

TEST_CASE("thread_pool: parallel_for rethrows a chunk's exception after the others finish", "[thread_pool]") {
  ThreadPool pool(3);
  std::atomic<int> running{0};
  auto body = [&](int64_t lo, int64_t hi) {
    ++running;
    for (int64_t i = lo; i < hi; ++i) {
      if (i == 37) {
        --running;
        throw std::runtime_error("index 37");
      }
    }
    --running;
  };
  CHECK_THROWS_WITH(pool.parallel_for(0, 1000, body), "index 37");
  CHECK(running == 0);  // no chunk is still running once parallel_for has thrown
  // The pool stays usable afterwards.
  check_parallel_for(pool, 0, 1000, 1);
}

TEST_CASE("thread_pool: parallel_for inside a task does not deadlock", "[thread_pool]") {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  std::vector<std::future<void>> tasks;
  // More tasks than workers, each with an inner parallel_for: every worker is busy in a nested call.
  for (int t = 0; t < 8; ++t)
    tasks.push_back(pool.submit([&] {
      pool.parallel_for(0, 100, [&](int64_t lo, int64_t hi) { sum += hi - lo; });
    }));
  for (auto& task : tasks) task.get();
  CHECK(sum == 800);
}

TEST_CASE("thread_pool: nested parallel_for from a body does not deadlock", "[thread_pool]") {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(0, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      pool.parallel_for(0, 50, [&](int64_t a, int64_t b) { sum += b - a; });
  });
  CHECK(sum == 16 * 50);
}

TEST_CASE("thread_pool: an exception from a nested parallel_for reaches the outer caller", "[thread_pool]") {
  ThreadPool pool(2);
  std::future<void> task = pool.submit([&] {
    pool.parallel_for(0, 10, [](int64_t lo, int64_t) {
      if (lo == 0) throw std::runtime_error("inner");
    });
  });
  CHECK_THROWS_WITH(task.get(), "inner");
}

TEST_CASE("thread_pool: the destructor finishes queued tasks", "[thread_pool]") {
  std::atomic<int> done{0};
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::thread opener;
  {
    ThreadPool pool(1);
    pool.submit([opened] { opened.wait(); });  // holds the only worker, so the rest stay queued
    for (int i = 0; i < 100; ++i) pool.submit([&] { ++done; });
    opener = std::thread([&] { gate.set_value(); });
  }  // ~ThreadPool runs here, with (almost always) the 100 tasks still queued
  opener.join();
  CHECK(done == 100);
}

TEST_CASE("thread_pool: many threads can submit at once", "[thread_pool]") {
  ThreadPool pool(4);
  constexpr int kSubmitters = 8, kEach = 500;
  std::vector<std::thread> submitters;
  std::vector<int64_t> sums(kSubmitters);
  for (int s = 0; s < kSubmitters; ++s)
    submitters.emplace_back([&, s] {
      std::vector<std::future<int>> results;
      for (int i = 0; i < kEach; ++i) results.push_back(pool.submit([i] { return i; }));
      for (auto& r : results) sums[size_t(s)] += r.get();
      // And parallel_for from several outside threads at once.
      std::atomic<int64_t> covered{0};
      pool.parallel_for(0, 1000, [&](int64_t lo, int64_t hi) { covered += hi - lo; }, 7);
      sums[size_t(s)] += covered;
    });
  for (auto& t : submitters) t.join();
  for (int64_t sum : sums) CHECK(sum == int64_t(kEach) * (kEach - 1) / 2 + 1000);
}
