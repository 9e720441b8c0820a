// The CLANG device: the host kit with the C compiler as a process (clang, or gcc), whatever the CPU
// device uses. It keeps the C path certified by the conformance suite, and is the CPU device's
// fallback compiler (devices/cpu.cpp).
#include "devices/host.h"

namespace kiln {

std::unique_ptr<Device> make_clang_device() { return make_host_device("CLANG", make_c_compiler("CLANG")); }

}  // namespace kiln
