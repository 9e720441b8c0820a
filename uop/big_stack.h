// Running a deeply recursive job on a thread with a large stack.
//
//   Schedule s = with_big_stack([&] { return create_schedule(outputs, ...); });
//
// Some passes recurse once per node of a user's graph (the scheduler, the kernel builder), so a long
// enough chain of ops would overflow the default 8 MiB stack and crash. Those passes run on a helper
// thread whose stack is reserved large (untouched pages cost nothing); exceptions come back to the caller.
#pragma once
#include <exception>
#include <functional>
#include <optional>
#include <type_traits>

namespace kiln {

void run_with_big_stack(const std::function<void()>& job);

template <typename F>
auto with_big_stack(F&& f) -> std::invoke_result_t<F> {
  using R = std::invoke_result_t<F>;
  std::optional<R> result;
  run_with_big_stack([&] { result.emplace(f()); });
  return std::move(*result);
}

}  // namespace kiln
