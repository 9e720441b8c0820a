// Running a program and collecting its output: how kiln calls C compilers (the CPU device, bench).
//
//   ProcessResult r = run_process({"clang", "--version"});
//   if (r.exit_code == 0) first_line = r.output.substr(0, r.output.find('\n'));
#pragma once
#include <string>
#include <vector>

namespace kiln {

struct ProcessResult {
  int exit_code;
  std::string output;  // stdout and stderr, interleaved as written
};

// Runs argv (argv[0] looked up on PATH) with stdin from /dev/null and waits for it. posix_spawn, not
// system(): no shell, so paths need no quoting, and it is safe from several threads at once (the pipe is
// close-on-exec, so one thread's child never holds another's pipe open). Throws Error if it cannot start.
ProcessResult run_process(const std::vector<std::string>& argv);

}  // namespace kiln
