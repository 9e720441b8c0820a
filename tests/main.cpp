// The test runner. With KILN_DEVICE naming a device that cannot be opened here (no driver, no GPU),
// the run is skipped with exit code 4 and the reason (CTest's SKIP_RETURN_CODE), so the conformance
// runs in tests/CMakeLists.txt certify every device that exists and say why for the others.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include "devices/device.h"
#include "uop/config.h"

int main(int argc, char** argv) {
  if (!kiln::config().device.empty()) {
    for (const kiln::DeviceStatus& status : kiln::probe_devices()) {
      if (status.name == kiln::default_device_name() && !status.available) {
        std::cout << "SKIPPED: KILN_DEVICE=" << status.name << " is not available here: " << status.reason << "\n";
        return 4;
      }
    }
  }
  return Catch::Session().run(argc, argv);
}
