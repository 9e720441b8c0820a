#include "uop/big_stack.h"

#include <pthread.h>

#include <cstring>

#include "uop/error.h"

namespace kiln {

namespace {
constexpr size_t kBigStackBytes = size_t{1} << 30;  // 1 GiB reserved; only what is used is touched

struct Job {
  const std::function<void()>* fn;
  std::exception_ptr error;
};

void* run_job(void* arg) {
  Job* job = static_cast<Job*>(arg);
  try {
    (*job->fn)();
  } catch (...) {
    job->error = std::current_exception();
  }
  return nullptr;
}
}  // namespace

void run_with_big_stack(const std::function<void()>& fn) {
  Job job{&fn, nullptr};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, kBigStackBytes);
  pthread_t thread;
  int failed = pthread_create(&thread, &attr, run_job, &job);
  pthread_attr_destroy(&attr);
  if (failed != 0) {  // no thread to be had (limits): run here, with the ordinary stack
    fn();
    return;
  }
  pthread_join(thread, nullptr);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace kiln
