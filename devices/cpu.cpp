// The CPU device (cpu.h): the host kit with the in-process LLVM compiler, or the C compiler when
// libLLVM cannot be used (the reason goes into DeviceSpec::note, which `kiln devices` prints).
#include "devices/cpu.h"

#include "uop/config.h"

namespace kiln {

std::unique_ptr<Device> make_cpu_device() {
  std::string why;
  if (config().cpu_compiler != "c") {
    try {
      return make_host_device("CPU", make_llvm_compiler("CPU"));
    } catch (const Error& e) {
      if (config().cpu_compiler == "llvm") throw;  // asked for by name: no fallback
      why = e.what();
    }
  } else {
    why = "KILN_CPU_COMPILER=c";
  }
  return make_host_device("CPU", make_c_compiler("CPU"), cat("C compiler process, not the in-process LLVM compiler: ", why));
}

}  // namespace kiln
