// libFuzzer target: serialized kernels (uop/serialize.h), the text the REF device compiles and a
// tuning cache entry's "ast" holds. Text that parses as a kernel AST (search/kernel_ast.h) is then
// lowered for the CPU, as `kiln cache verify` does: lowering a checked AST must not break an invariant.
#include "devices/device.h"
#include "fuzz.h"
#include "lower/lower.h"
#include "search/tuning_cache.h"
#include "uop/serialize.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_errors([&] { parse_program(text); });
  return fuzz::expect_errors([&] {
    UOpPtr ast = parse_ast_text(text);
    lower_kernel(ast, get_device("CPU").spec());
  });
}
