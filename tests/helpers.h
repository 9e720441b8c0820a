// Shared test helpers: Catch2 prints UOps as expressions, not as pointers.
#pragma once
#include <catch2/catch.hpp>

#include "uop/uop.h"

namespace Catch {
template <>
struct StringMaker<kiln::UOpPtr> {
  static std::string convert(const kiln::UOpPtr& u) { return kiln::str(u); }
};
}  // namespace Catch

namespace kiln::test {

inline size_t node_count(const UOpPtr& u) { return toposort(u).size(); }

}  // namespace kiln::test
