// [devices-check] `kiln devices --check` (tools/devices_check.cpp) certifies a working device and fails
// a faulty one: a wrapper around the default device whose copy_out flips one bit (the lowest of one
// float's mantissa, a relative error of 1e-7 that a tolerance would let through), and a device slower
// than the machine it runs on. The wrappers are registered with register_device, so these cases are
// hidden and run in a process of their own (tests/CMakeLists.txt): every later test would see them.
#include <catch2/catch.hpp>

#include <sstream>

#include "devices/device.h"
#include "devices_check.h"  // tools/

namespace kiln {
namespace {

// The default device under another name; with `flip`, copy_out flips the lowest bit of the 4-byte word
// in the middle of every copy.
class WrappedDevice : public Device {
 public:
  WrappedDevice(Device& inner, const std::string& name, bool flip) : inner_(inner), spec_(inner.spec()), flip_(flip) {
    spec_.name = name;
  }
  ~WrappedDevice() override { release_cached(); }

  const DeviceSpec& spec() const override { return spec_; }
  Binary compile(const std::string& source, const std::string& name) override { return inner_.compile(source, name); }
  std::unique_ptr<Program> load(const Binary& binary) override { return inner_.load(binary); }
  void synchronize() override { inner_.synchronize(); }

 protected:
  RawBuffer alloc_raw(size_t bytes) override { return inner_.alloc(bytes); }
  void free_raw(RawBuffer buffer) override { inner_.free(buffer); }
  void copy_in_raw(RawBuffer dst, const void* src, size_t bytes) override { inner_.copy_in(dst, src, bytes); }
  void copy_out_raw(void* dst, RawBuffer src, size_t bytes) override {
    inner_.copy_out(dst, src, bytes);
    if (flip_ && bytes >= 4) static_cast<unsigned char*>(dst)[bytes / 8 * 4] ^= 1;
  }

 private:
  Device& inner_;
  DeviceSpec spec_;
  bool flip_;
};

// Registers WRAPPED and FLIPPED once per process.
void register_wrappers() {
  static bool done = [] {
    for (bool flip : {false, true}) {
      std::string name = flip ? "FLIPPED" : "WRAPPED";
      register_device(name, [name, flip] {
        return std::make_unique<WrappedDevice>(get_device(default_device_name()), name, flip);
      });
    }
    return true;
  }();
  (void)done;
}

TEST_CASE("devices --check certifies the default device under another name", "[.][devices-check]") {
  register_wrappers();
  std::ostringstream out;
  bool ok = check_device("WRAPPED", {default_device_name()}, nullptr, out);
  INFO(out.str());
  CHECK(ok);
  CHECK(out.str().find("verdict: works") != std::string::npos);
}

TEST_CASE("devices --check fails a device whose copy_out flips one bit", "[.][devices-check]") {
  register_wrappers();
  std::ostringstream out;
  bool ok = check_device("FLIPPED", {}, nullptr, out);
  std::string text = out.str();
  INFO(text);
  CHECK_FALSE(ok);
  CHECK(text.find("copy in and out, every bit pattern") != std::string::npos);
  CHECK(text.find("(bit-exact op)") != std::string::npos);
  CHECK(text.find("verdict: FAILED") != std::string::npos);
  // The healthy device fails its copy across to the faulty one, too.
  std::ostringstream across;
  CHECK_FALSE(check_device("WRAPPED", {"FLIPPED"}, nullptr, across));
  INFO(across.str());
  CHECK(across.str().find("copy to FLIPPED and back") != std::string::npos);
}

TEST_CASE("devices --check fails a device far slower than the machine, and says by how much", "[.][devices-check]") {
  register_wrappers();
  MachineLimits fast_machine{1e12, 1e12, "made up", "made up"};  // no device reaches a petabyte per second
  std::ostringstream out;
  bool ok = check_device("WRAPPED", {}, &fast_machine, out);
  INFO(out.str());
  CHECK_FALSE(ok);
  CHECK(out.str().find("bandwidth below") != std::string::npos);
  CHECK(out.str().find("arithmetic below") != std::string::npos);
  CHECK(out.str().find("verdict: NOT CERTIFIED") != std::string::npos);
  MachineLimits slow_machine{1e-6, 1e-6, "made up", "made up"};
  std::ostringstream fine;
  CHECK(check_device("WRAPPED", {}, &slow_machine, fine));
}

TEST_CASE("register_device refuses a taken name and a name that is not upper case", "[.][devices-check]") {
  register_wrappers();
  auto none = [] { return std::unique_ptr<Device>(); };
  CHECK_THROWS_WITH(register_device("WRAPPED", none), Catch::Contains("WRAPPED") && Catch::Contains("registered already"));
  CHECK_THROWS_WITH(register_device("mine", none), Catch::Contains("\"mine\"") && Catch::Contains("upper-case"));
}

}  // namespace
}  // namespace kiln
