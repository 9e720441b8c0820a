// kiln cache: list, clear, export, import and verify the tuning cache (being written).
#include <CLI/CLI.hpp>

#include <functional>

#include "uop/error.h"

namespace kiln {

std::function<void()> setup_cache(CLI::App& command) {
  command.allow_extras();
  return [] { throw Error("kiln cache: not implemented yet"); };
}

}  // namespace kiln
