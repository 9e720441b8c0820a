#include "uop/error.h"

namespace kiln {

void throw_internal(const char* invariant, const std::string& detail, const char* file, int line) {
  throw InternalError(cat("internal error: invariant `", invariant, "` failed at ", file, ":", line,
                          detail.empty() ? "" : ": ", detail, " (this is a kiln bug; please report it)"));
}

}  // namespace kiln
