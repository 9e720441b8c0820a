// kiln search: tune a named workload on a device (being written).
#include <CLI/CLI.hpp>

#include <functional>

#include "uop/error.h"

namespace kiln {

std::function<void()> setup_search(CLI::App& command) {
  command.allow_extras();
  return [] { throw Error("kiln search: not implemented yet"); };
}

}  // namespace kiln
