// The VULKAN device: any Vulkan 1.2+ compute device (Mesa's lavapipe on these machines), driven
// through libvulkan.so.1 loaded with dlopen. Kernels arrive as SPIR-V words from
// lower/renderers/spirv.cpp; compile() checks them (and, with KILN_SPIRV_VAL=1, runs spirv-val),
// load() builds a compute pipeline through a VkPipelineCache kept in <cache_dir>/vulkan/.
//
//   Device& vk = get_device("VULKAN");
//   std::unique_ptr<Program> p = vk.load(vk.compile(spirv_bytes, "E_16"));
//   p->launch(buffers, vars, LaunchDims{{16, 1, 1}, {1, 1, 1}}, false);   // queued; copy_out waits
//
// Memory is host-visible and coherent (every Vulkan device has such a type), mapped once: copies are
// memcpy after the queue is idle. Buffer slot i is binding i of descriptor set 0; DEFINE_VARs are
// int64 push constants. Each launch is one command buffer that starts with a compute->compute
// barrier, so kernels see their predecessors' writes, and ends with a compute->host barrier.
#define VK_NO_PROTOTYPES
#include <dlfcn.h>
#include <unistd.h>
#include <spirv/unified1/spirv.hpp11>
#include <vulkan/vulkan.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>

#include "devices/device.h"
#include "uop/config.h"
#include "uop/process.h"

// Vulkan structs are written `VkXxx info{VK_STRUCTURE_TYPE_XXX};`: the sType set, every other member zero.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kiln {
namespace {

// The entry points kiln uses, loaded by name: instance-level ones, then device-level ones.
#define KILN_VK_INSTANCE_FUNCTIONS(X)                                                                          \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                          \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkGetPhysicalDeviceMemoryProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)
#define KILN_VK_DEVICE_FUNCTIONS(X)                                                                            \
  X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) \
  X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkCreateShaderModule) X(vkDestroyShaderModule)         \
  X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout)                      \
  X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreatePipelineCache)          \
  X(vkGetPipelineCacheData) X(vkCreateDescriptorPool) X(vkAllocateDescriptorSets) X(vkFreeDescriptorSets)       \
  X(vkUpdateDescriptorSets) X(vkCreateCommandPool) X(vkAllocateCommandBuffers) X(vkResetCommandBuffer)          \
  X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets)                 \
  X(vkCmdPushConstants) X(vkCmdDispatch) X(vkCmdPipelineBarrier) X(vkQueueSubmit) X(vkCreateFence)              \
  X(vkWaitForFences) X(vkResetFences)

struct VulkanApi {
#define KILN_VK_MEMBER(name) PFN_##name name = nullptr;
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  PFN_vkCreateInstance vkCreateInstance = nullptr;
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_MEMBER)
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_MEMBER)
#undef KILN_VK_MEMBER
};

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "an error";
  }
}

bool out_of_memory(VkResult r) { return r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY; }

// One wrapper for every call: a failure names the call and the result.
void check(VkResult r, const char* call) {
  if (r == VK_SUCCESS) return;
  std::string what = cat("VULKAN: ", call, " failed: ", result_name(r), " (", static_cast<int>(r), ")");
  if (out_of_memory(r)) throw OutOfMemory(what);
  throw Error(what);
}

std::string version_string(uint32_t v) {
  return cat(VK_API_VERSION_MAJOR(v), ".", VK_API_VERSION_MINOR(v), ".", VK_API_VERSION_PATCH(v));
}

// --- SPIR-V: what the device needs to know about a module ------------------------------------------

constexpr uint32_t kSpirvMagic = 0x07230203;

struct ModuleInfo {
  std::vector<uint32_t> words;
  std::string entry;
  std::set<uint32_t> capabilities;
  uint32_t bindings = 0;      // 1 + the largest Binding decoration
  uint32_t push_members = 0;  // members of the push-constant block (DEFINE_VARs)
  std::array<uint32_t, 3> local{1, 1, 1};
  std::optional<uint64_t> loop_iterations;  // the renderer's bound on one invocation's loop iterations
};

// The note lower/renderers/spirv.h (kLoopIterationsNote) puts in every module kiln renders.
constexpr std::string_view kLoopIterationsNote = "kiln.loop_iterations ";

// Walks the instructions of a module; throws a message (no device name yet) where it is malformed.
ModuleInfo reflect(const std::string& bytes) {
  ModuleInfo info;
  if (bytes.size() % 4 != 0 || bytes.size() < 20)
    throw Error(cat("a SPIR-V module is whole 32-bit words with a 5-word header; got ", bytes.size(), " bytes"));
  info.words.resize(bytes.size() / 4);
  std::memcpy(info.words.data(), bytes.data(), bytes.size());
  const std::vector<uint32_t>& w = info.words;
  if (w[0] != kSpirvMagic) throw Error(cat("not a SPIR-V module: the first word is 0x", std::hex, w[0], ", not 0x07230203"));
  std::map<uint32_t, uint32_t> pointee, struct_members;
  uint32_t push_variable_type = 0;
  for (size_t at = 5; at < w.size();) {
    uint32_t count = w[at] >> 16, opcode = w[at] & 0xffff;
    if (count == 0 || at + count > w.size()) throw Error(cat("SPIR-V instruction at word ", at, " runs past the module's end"));
    const uint32_t* ops = &w[at + 1];
    switch (static_cast<spv::Op>(opcode)) {
      case spv::Op::OpCapability: info.capabilities.insert(ops[0]); break;
      case spv::Op::OpEntryPoint:  // model, function, name (a nul-terminated string), interface
        if (count >= 4) info.entry = std::string(reinterpret_cast<const char*>(ops + 2), strnlen(reinterpret_cast<const char*>(ops + 2), (count - 3) * 4));
        break;
      case spv::Op::OpExecutionMode:  // function, mode, literals
        if (ops[1] == static_cast<uint32_t>(spv::ExecutionMode::LocalSize) && count >= 6) info.local = {ops[2], ops[3], ops[4]};
        break;
      case spv::Op::OpDecorate:  // target, decoration, literals
        if (ops[1] == static_cast<uint32_t>(spv::Decoration::Binding) && count >= 4) info.bindings = std::max(info.bindings, ops[2] + 1);
        break;
      case spv::Op::OpModuleProcessed: {
        std::string note(reinterpret_cast<const char*>(ops), strnlen(reinterpret_cast<const char*>(ops), (count - 1) * 4));
        if (note.rfind(kLoopIterationsNote, 0) == 0) info.loop_iterations = std::strtoull(note.c_str() + kLoopIterationsNote.size(), nullptr, 10);
        break;
      }
      case spv::Op::OpTypeStruct: struct_members[ops[0]] = count - 2; break;
      case spv::Op::OpTypePointer: pointee[ops[0]] = ops[2]; break;  // result, storage, type
      case spv::Op::OpVariable:                                        // type, result, storage
        if (ops[2] == static_cast<uint32_t>(spv::StorageClass::PushConstant)) push_variable_type = ops[0];
        break;
      default: break;
    }
    at += count;
  }
  if (info.entry.empty()) throw Error("the SPIR-V module has no OpEntryPoint");
  if (push_variable_type != 0) info.push_members = struct_members[pointee[push_variable_type]];
  return info;
}

// A tool of spirv-tools (spirv-val, spirv-dis) run on the module, through a temporary file.
ProcessResult run_spirv_tool(const std::vector<std::string>& tool, const std::vector<uint32_t>& words) {
  std::string path = cat(std::filesystem::temp_directory_path().string(), "/kiln_spirv_", getpid(), "_",
                         reinterpret_cast<uintptr_t>(&words), ".spv");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(words.data()), static_cast<std::streamsize>(words.size() * 4));
  }
  std::vector<std::string> argv = tool;
  argv.push_back(path);
  try {
    ProcessResult r = run_process(argv);
    std::filesystem::remove(path);
    return r;
  } catch (...) {
    std::filesystem::remove(path);
    throw;
  }
}

// The module as text for error messages: spirv-dis if it is installed.
std::string disassemble(const std::vector<uint32_t>& words) {
  try {
    ProcessResult r = run_spirv_tool({"spirv-dis", "--no-color"}, words);
    if (r.exit_code == 0) return r.output;
  } catch (const Error&) {
  }
  return cat("(a binary SPIR-V module of ", words.size(), " words; install spirv-tools for its disassembly)\n");
}

std::string capability_name(uint32_t c) {
  switch (c) {
    case 1: return "Shader";
    case 9: return "Float16";
    case 10: return "Float64";
    case 11: return "Int64";
    case 22: return "Int16";
    case 39: return "Int8";
    case 4433: return "StorageBuffer16BitAccess";
    case 4448: return "StorageBuffer8BitAccess";
    case 4466: return "SignedZeroInfNanPreserve";
    default: return cat("capability ", c);
  }
}

// --- the device ------------------------------------------------------------------------------------

struct VulkanBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;
};

// One queued launch: what it holds until its fence signals.
struct Submission {
  VkCommandBuffer commands;
  VkFence fence;
  VkDescriptorSet set;
  VkDescriptorPool pool;
};

class VulkanDevice;

class VulkanProgram : public Program {
 public:
  VulkanProgram(VulkanDevice& device, ModuleInfo info);
  ~VulkanProgram() override;

 protected:
  double run(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed) override;

 private:
  VulkanDevice& device_;
  ModuleInfo info_;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
};

class VulkanDevice : public Device {
 public:
  VulkanDevice() {
    open_library();
    create_instance();
    pick_physical_device();
    create_device();
    create_pipeline_cache();
  }
  // Never runs for the registry's devices (they live until exit); the pipeline cache is saved at exit.
  ~VulkanDevice() override { release_cached(); }

  const DeviceSpec& spec() const override { return spec_; }
  const VulkanApi& api() const { return vk_; }
  VkDevice device() const { return device_; }
  uint32_t max_bindings() const { return max_bindings_; }
  uint32_t max_push_bytes() const { return max_push_bytes_; }

  void synchronize() override {
    std::lock_guard<std::mutex> lock(mu_);
    while (!in_flight_.empty()) retire_oldest();
  }

  Binary compile(const std::string& source, const std::string& name) override {
    ModuleInfo info;
    try {
      info = reflect(source);
    } catch (const Error& e) {
      throw CompileError("VULKAN", name, e.what(), "(not a readable SPIR-V module)");
    }
    for (uint32_t c : info.capabilities)
      if (!supported_.count(c))
        throw CompileError("VULKAN", name,
                           cat("the module needs the SPIR-V capability ", capability_name(c), ", which ", spec_.arch,
                               " does not support (see `kiln devices`)"),
                           disassemble(info.words));
    if (loop_limit_ > 0 && info.loop_iterations.value_or(0) > loop_limit_)
      throw CompileError("VULKAN", name,
                         cat("one invocation of this kernel may run up to ", *info.loop_iterations, " loop iterations, and ",
                             spec_.arch, " (Mesa lavapipe) silently ends an invocation's loops after ", loop_limit_,
                             " in total; spread the work over more workgroups (a smaller kernel, or GPU launch dims)"),
                         disassemble(info.words));
    if (config().spirv_val) validate(info, name);
    return Binary{name, std::vector<uint8_t>(source.begin(), source.end())};
  }

  std::unique_ptr<Program> load(const Binary& binary) override {
    ModuleInfo info;
    try {
      info = reflect(std::string(binary.data.begin(), binary.data.end()));
    } catch (const Error& e) {
      throw CompileError("VULKAN", binary.name, e.what(), "(not a readable SPIR-V module)");
    }
    return std::make_unique<VulkanProgram>(*this, std::move(info));
  }

  // Builds the pipeline through the device's pipeline cache.
  VkPipeline create_pipeline(const VkComputePipelineCreateInfo& info, const ModuleInfo& module) {
    VkPipeline pipeline = VK_NULL_HANDLE;
    VkResult r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      r = vk_.vkCreateComputePipelines(device_, pipeline_cache_, 1, &info, nullptr, &pipeline);
      cache_dirty_ = true;
    }
    if (r != VK_SUCCESS) {
      if (out_of_memory(r)) check(r, "vkCreateComputePipelines");
      throw CompileError("VULKAN", module.entry, cat("vkCreateComputePipelines failed: ", result_name(r), " (", static_cast<int>(r), ")"),
                         disassemble(module.words));
    }
    return pipeline;
  }

  // Records and submits one dispatch; returns once it is queued.
  VkFence submit(VkPipeline pipeline, VkPipelineLayout layout, VkDescriptorSetLayout set_layout,
                 std::span<const RawBuffer> bufs, uint32_t bindings, std::span<const int64_t> vars, const LaunchDims& dims) {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_.size() >= kMaxInFlight) retire_oldest();
    Submission s{command_buffer(), fence(), VK_NULL_HANDLE, VK_NULL_HANDLE};
    if (bindings > 0) {
      std::tie(s.set, s.pool) = descriptor_set(set_layout);
      std::vector<VkDescriptorBufferInfo> infos(bindings);
      std::vector<VkWriteDescriptorSet> writes(bindings);
      for (uint32_t i = 0; i < bindings; ++i) {
        infos[i] = {static_cast<VulkanBuffer*>(bufs[i].handle)->buffer, 0, VK_WHOLE_SIZE};
        writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
        writes[i].dstSet = s.set;
        writes[i].dstBinding = i;
        writes[i].descriptorCount = 1;
        writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        writes[i].pBufferInfo = &infos[i];
      }
      vk_.vkUpdateDescriptorSets(device_, bindings, writes.data(), 0, nullptr);
    }
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vk_.vkBeginCommandBuffer(s.commands, &begin), "vkBeginCommandBuffer");
    barrier(s.commands, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    vk_.vkCmdBindPipeline(s.commands, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    if (s.set != VK_NULL_HANDLE)
      vk_.vkCmdBindDescriptorSets(s.commands, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &s.set, 0, nullptr);
    if (!vars.empty())
      vk_.vkCmdPushConstants(s.commands, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<uint32_t>(vars.size() * 8), vars.data());
    vk_.vkCmdDispatch(s.commands, static_cast<uint32_t>(dims.global[0]), static_cast<uint32_t>(dims.global[1]),
                      static_cast<uint32_t>(dims.global[2]));
    barrier(s.commands, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
            VK_ACCESS_HOST_READ_BIT);
    check(vk_.vkEndCommandBuffer(s.commands), "vkEndCommandBuffer");
    VkSubmitInfo info{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    info.commandBufferCount = 1;
    info.pCommandBuffers = &s.commands;
    check(vk_.vkQueueSubmit(queue_, 1, &info, s.fence), "vkQueueSubmit");
    in_flight_.push_back(s);
    return s.fence;
  }

  void wait(VkFence fence) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Submission& s : in_flight_)
      if (s.fence == fence) check(vk_.vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  }

  // Saves the pipeline cache (atomically: a temporary file, then rename) if pipelines were added.
  void save_pipeline_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cache_dirty_ || pipeline_cache_ == VK_NULL_HANDLE) return;
    size_t size = 0;
    if (vk_.vkGetPipelineCacheData(device_, pipeline_cache_, &size, nullptr) != VK_SUCCESS) return;
    std::vector<char> data(size);
    if (vk_.vkGetPipelineCacheData(device_, pipeline_cache_, &size, data.data()) != VK_SUCCESS) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(cache_path_).parent_path(), ec);
    std::string tmp = cat(cache_path_, ".tmp", getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(data.data(), static_cast<std::streamsize>(size));
      if (!out) return;  // a cache that cannot be written only costs time on the next run
    }
    std::filesystem::rename(tmp, cache_path_, ec);
    cache_dirty_ = false;
  }

 protected:
  RawBuffer alloc_raw(size_t bytes) override {
    if (static_cast<int64_t>(bytes) > spec_.max_buffer_bytes)
      throw OutOfMemory(cat("VULKAN: a buffer of ", bytes, " bytes is larger than ", spec_.arch, " can bind to a kernel (",
                            spec_.max_buffer_bytes, " bytes: maxStorageBufferRange, or maxMemoryAllocationSize); split the "
                            "tensor or use another device"));
    auto buffer = std::make_unique<VulkanBuffer>();
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.size = std::max<size_t>((bytes + 15) / 16 * 16, 16);  // Vulkan has no empty buffers
    info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    std::lock_guard<std::mutex> lock(mu_);
    check(vk_.vkCreateBuffer(device_, &info, nullptr, &buffer->buffer), "vkCreateBuffer");
    VkMemoryRequirements needs;
    vk_.vkGetBufferMemoryRequirements(device_, buffer->buffer, &needs);
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.allocationSize = needs.size;
    alloc.memoryTypeIndex = memory_type(needs.memoryTypeBits);
    VkResult r = vk_.vkAllocateMemory(device_, &alloc, nullptr, &buffer->memory);
    if (r != VK_SUCCESS) vk_.vkDestroyBuffer(device_, buffer->buffer, nullptr);
    check(r, "vkAllocateMemory");
    check(vk_.vkBindBufferMemory(device_, buffer->buffer, buffer->memory, 0), "vkBindBufferMemory");
    check(vk_.vkMapMemory(device_, buffer->memory, 0, VK_WHOLE_SIZE, 0, &buffer->mapped), "vkMapMemory");
    return RawBuffer{buffer.release(), bytes};
  }

  void free_raw(RawBuffer raw) override {
    synchronize();  // a queued kernel may still use it
    std::unique_ptr<VulkanBuffer> buffer(static_cast<VulkanBuffer*>(raw.handle));
    std::lock_guard<std::mutex> lock(mu_);
    vk_.vkDestroyBuffer(device_, buffer->buffer, nullptr);
    vk_.vkFreeMemory(device_, buffer->memory, nullptr);
  }
  void copy_in_raw(RawBuffer dst, const void* src, size_t bytes) override {
    synchronize();  // a queued kernel may still read or write dst
    std::memcpy(static_cast<VulkanBuffer*>(dst.handle)->mapped, src, bytes);
  }
  void copy_out_raw(void* dst, RawBuffer src, size_t bytes) override {
    synchronize();
    std::memcpy(dst, static_cast<VulkanBuffer*>(src.handle)->mapped, bytes);
  }

 private:
  static constexpr size_t kMaxInFlight = 64;
  static constexpr uint32_t kSetsPerPool = 256;

  void open_library() {
    library_ = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr)
      throw Error(cat("cannot load the Vulkan loader libvulkan.so.1 (", dlerror(),
                      "); install libvulkan1 and a Vulkan driver (mesa-vulkan-drivers provides lavapipe, which runs on the CPU)"));
    vk_.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(library_, "vkGetInstanceProcAddr"));
    if (vk_.vkGetInstanceProcAddr == nullptr) throw Error("libvulkan.so.1 has no vkGetInstanceProcAddr");
    vk_.vkCreateInstance = reinterpret_cast<PFN_vkCreateInstance>(vk_.vkGetInstanceProcAddr(nullptr, "vkCreateInstance"));
    vk_.vkEnumerateInstanceVersion =
        reinterpret_cast<PFN_vkEnumerateInstanceVersion>(vk_.vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
    if (vk_.vkCreateInstance == nullptr || vk_.vkEnumerateInstanceVersion == nullptr)
      throw Error("the Vulkan loader is older than Vulkan 1.1 (no vkEnumerateInstanceVersion); kiln needs Vulkan 1.2");
  }

  void create_instance() {
    uint32_t version = 0;
    check(vk_.vkEnumerateInstanceVersion(&version), "vkEnumerateInstanceVersion");
    if (version < VK_API_VERSION_1_2)
      throw Error(cat("the Vulkan loader supports Vulkan ", version_string(version), "; kiln needs 1.2 or later"));
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "kiln";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    VkResult r = vk_.vkCreateInstance(&info, nullptr, &instance_);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER) throw Error("no Vulkan driver is installed (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER); install mesa-vulkan-drivers");
    check(r, "vkCreateInstance");
#define KILN_VK_LOAD(name)                                                                              \
  vk_.name = reinterpret_cast<PFN_##name>(vk_.vkGetInstanceProcAddr(instance_, #name));                 \
  if (vk_.name == nullptr) throw Error(cat("the Vulkan loader has no ", #name));
    KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
  }

  // Prefers real GPUs to software ones; the first compute-capable Vulkan 1.2 device of the best kind.
  void pick_physical_device() {
    uint32_t count = 0;
    check(vk_.vkEnumeratePhysicalDevices(instance_, &count, nullptr), "vkEnumeratePhysicalDevices");
    std::vector<VkPhysicalDevice> all(count);
    check(vk_.vkEnumeratePhysicalDevices(instance_, &count, all.data()), "vkEnumeratePhysicalDevices");
    if (count == 0) throw Error("no Vulkan device found; install a Vulkan driver (mesa-vulkan-drivers provides lavapipe)");
    auto rank = [](VkPhysicalDeviceType t) {
      switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
        default: return 4;
      }
    };
    std::string rejected;
    int best = 99;
    for (VkPhysicalDevice d : all) {
      VkPhysicalDeviceProperties p;
      vk_.vkGetPhysicalDeviceProperties(d, &p);
      std::optional<uint32_t> family = compute_family(d);
      if (p.apiVersion < VK_API_VERSION_1_2 || !family) {
        rejected += cat("\n  ", p.deviceName, ": ", !family ? "no compute queue" : cat("Vulkan ", version_string(p.apiVersion), " < 1.2"));
        continue;
      }
      if (rank(p.deviceType) < best) {
        best = rank(p.deviceType);
        physical_ = d;
        family_ = *family;
      }
    }
    if (physical_ == VK_NULL_HANDLE) throw Error(cat("no Vulkan 1.2 compute device:", rejected));
  }

  std::optional<uint32_t> compute_family(VkPhysicalDevice d) {
    uint32_t count = 0;
    vk_.vkGetPhysicalDeviceQueueFamilyProperties(d, &count, nullptr);
    std::vector<VkQueueFamilyProperties> families(count);
    vk_.vkGetPhysicalDeviceQueueFamilyProperties(d, &count, families.data());
    for (uint32_t i = 0; i < count; ++i)
      if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
    return std::nullopt;
  }

  // Enables the features kiln's SPIR-V may use, where present, and fills the spec from the limits.
  void create_device() {
    VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 all{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    all.pNext = &f11;
    f11.pNext = &f12;
    vk_.vkGetPhysicalDeviceFeatures2(physical_, &all);
    VkPhysicalDeviceVulkan11Features want11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceVulkan12Features want12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 want{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    want.pNext = &want11;
    want11.pNext = &want12;
    want.features.shaderInt16 = all.features.shaderInt16;
    want.features.shaderInt64 = all.features.shaderInt64;
    want.features.shaderFloat64 = all.features.shaderFloat64;
    want11.storageBuffer16BitAccess = f11.storageBuffer16BitAccess;
    want12.shaderInt8 = f12.shaderInt8;
    want12.storageBuffer8BitAccess = f12.storageBuffer8BitAccess;
    supported_ = {1};  // Shader
    if (want.features.shaderInt16) supported_.insert(22);
    if (want.features.shaderInt64) supported_.insert(11);
    if (want.features.shaderFloat64) supported_.insert(10);
    if (want12.shaderInt8) supported_.insert(39);
    if (want11.storageBuffer16BitAccess) supported_.insert(4433);
    if (want12.storageBuffer8BitAccess) supported_.insert(4448);
    VkPhysicalDeviceFloatControlsProperties controls{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &controls;
    vk_.vkGetPhysicalDeviceProperties2(physical_, &props);
    if (controls.shaderSignedZeroInfNanPreserveFloat32 && (controls.shaderSignedZeroInfNanPreserveFloat64 || !want.features.shaderFloat64))
      supported_.insert(4466);  // SignedZeroInfNanPreserve

    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    queue.queueFamilyIndex = family_;
    queue.queueCount = 1;
    queue.pQueuePriorities = &priority;
    VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    info.pNext = &want;
    info.queueCreateInfoCount = 1;
    info.pQueueCreateInfos = &queue;
    check(vk_.vkCreateDevice(physical_, &info, nullptr, &device_), "vkCreateDevice");
#define KILN_VK_LOAD(name)                                                                              \
  vk_.name = reinterpret_cast<PFN_##name>(vk_.vkGetDeviceProcAddr(device_, #name));                     \
  if (vk_.name == nullptr) throw Error(cat("the Vulkan driver has no ", #name));
    KILN_VK_DEVICE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
    vk_.vkGetDeviceQueue(device_, family_, 0, &queue_);
    VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool.queueFamilyIndex = family_;
    check(vk_.vkCreateCommandPool(device_, &pool, nullptr, &command_pool_), "vkCreateCommandPool");
    fill_spec(want, want11, want12);
  }

  void fill_spec(const VkPhysicalDeviceFeatures2& f, const VkPhysicalDeviceVulkan11Features& f11,
                 const VkPhysicalDeviceVulkan12Features& f12) {
    VkPhysicalDeviceVulkan11Properties p11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES};
    VkPhysicalDeviceVulkan12Properties p12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES};
    VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props.pNext = &p11;
    p11.pNext = &p12;
    vk_.vkGetPhysicalDeviceProperties2(physical_, &props);
    const VkPhysicalDeviceLimits& l = props.properties.limits;
    spec_.name = "VULKAN";
    spec_.arch = props.properties.deviceName;
    spec_.compiler = cat("Vulkan ", version_string(props.properties.apiVersion), " ", p12.driverName, " ", p12.driverInfo,
                         " (driver ", props.properties.driverVersion, ")");
    spec_.lang = Language::SPIRV;
    spec_.threads = 1;
    spec_.max_local = l.maxComputeWorkGroupInvocations;
    for (int d = 0; d < 3; ++d) {
      spec_.max_local_dims[d] = l.maxComputeWorkGroupSize[d];
      spec_.max_global_dims[d] = l.maxComputeWorkGroupCount[d];
    }
    spec_.shared_bytes = l.maxComputeSharedMemorySize;
    spec_.max_buffer_bytes = static_cast<int64_t>(std::min<VkDeviceSize>(l.maxStorageBufferRange, p11.maxMemoryAllocationSize));
    // float16 is stored as 16 bits and converted with integer arithmetic: no Float16 capability needed.
    spec_.has_fp16 = f11.storageBuffer16BitAccess && f.features.shaderInt16;
    spec_.has_fp64 = f.features.shaderFloat64 && f.features.shaderInt64;
    max_bindings_ = std::min(l.maxPerStageDescriptorStorageBuffers, l.maxDescriptorSetStorageBuffers);
    max_push_bytes_ = l.maxPushConstantsSize;
    // llvmpipe guards against endless loops by ending a shader invocation's loops after 65535 back edges
    // in all (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS, Mesa 22); beyond, results would be silently wrong.
    if (p12.driverID == VK_DRIVER_ID_MESA_LLVMPIPE) loop_limit_ = 65535;
    (void)f12;
    VkPhysicalDeviceMemoryProperties memory;
    vk_.vkGetPhysicalDeviceMemoryProperties(physical_, &memory);
    memory_ = memory;
  }

  // Host-visible and coherent memory (which every device has), device-local where possible.
  uint32_t memory_type(uint32_t allowed) const {
    const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int found = -1;
    for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
      VkMemoryPropertyFlags f = memory_.memoryTypes[i].propertyFlags;
      if (!(allowed & (1u << i)) || (f & host) != host) continue;
      if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) return i;
      if (found < 0) found = static_cast<int>(i);
    }
    if (found < 0) throw Error(cat("VULKAN: ", spec_.arch, " has no host-visible coherent memory for storage buffers"));
    return static_cast<uint32_t>(found);
  }

  void create_pipeline_cache() {
    cache_path_ = config().cache_dir + "/vulkan/pipeline_cache.bin";
    std::vector<char> data;
    if (std::ifstream in{cache_path_, std::ios::binary}) data.assign(std::istreambuf_iterator<char>(in), {});
    VkPipelineCacheCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    info.initialDataSize = data.size();  // the driver checks the header and ignores data of another device
    info.pInitialData = data.empty() ? nullptr : data.data();
    if (vk_.vkCreatePipelineCache(device_, &info, nullptr, &pipeline_cache_) != VK_SUCCESS) {
      info.initialDataSize = 0;
      info.pInitialData = nullptr;
      check(vk_.vkCreatePipelineCache(device_, &info, nullptr, &pipeline_cache_), "vkCreatePipelineCache");
    }
  }

  void validate(const ModuleInfo& info, const std::string& name) {
    ProcessResult r;
    try {
      r = run_spirv_tool({"spirv-val", "--target-env", "vulkan1.2"}, info.words);
    } catch (const Error& e) {
      throw Error(cat("VULKAN: KILN_SPIRV_VAL=1 asks to validate kernel ", name, " with spirv-val, which cannot run (",
                      e.what(), "); install spirv-tools or unset KILN_SPIRV_VAL"));
    }
    if (r.exit_code != 0) throw CompileError("VULKAN", name, cat("spirv-val --target-env vulkan1.2 rejects the module:\n", r.output), disassemble(info.words));
  }

  // Waits for the oldest submission and recycles what it held. Called with mu_ held.
  void retire_oldest() {
    Submission s = in_flight_.front();
    in_flight_.pop_front();
    check(vk_.vkWaitForFences(device_, 1, &s.fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    check(vk_.vkResetFences(device_, 1, &s.fence), "vkResetFences");
    free_fences_.push_back(s.fence);
    check(vk_.vkResetCommandBuffer(s.commands, 0), "vkResetCommandBuffer");
    free_commands_.push_back(s.commands);
    if (s.set != VK_NULL_HANDLE) check(vk_.vkFreeDescriptorSets(device_, s.pool, 1, &s.set), "vkFreeDescriptorSets");
  }

  VkCommandBuffer command_buffer() {
    if (!free_commands_.empty()) {
      VkCommandBuffer c = free_commands_.back();
      free_commands_.pop_back();
      return c;
    }
    VkCommandBufferAllocateInfo info{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    info.commandPool = command_pool_;
    info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    info.commandBufferCount = 1;
    VkCommandBuffer c;
    check(vk_.vkAllocateCommandBuffers(device_, &info, &c), "vkAllocateCommandBuffers");
    return c;
  }

  VkFence fence() {
    if (!free_fences_.empty()) {
      VkFence f = free_fences_.back();
      free_fences_.pop_back();
      return f;
    }
    VkFenceCreateInfo info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence f;
    check(vk_.vkCreateFence(device_, &info, nullptr, &f), "vkCreateFence");
    return f;
  }

  // A descriptor set from the newest pool with room; a new pool when all are full.
  std::pair<VkDescriptorSet, VkDescriptorPool> descriptor_set(VkDescriptorSetLayout layout) {
    VkDescriptorSetAllocateInfo info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    info.descriptorSetCount = 1;
    info.pSetLayouts = &layout;
    for (auto it = descriptor_pools_.rbegin(); it != descriptor_pools_.rend(); ++it) {
      info.descriptorPool = *it;
      VkDescriptorSet set;
      VkResult r = vk_.vkAllocateDescriptorSets(device_, &info, &set);
      if (r == VK_SUCCESS) return {set, *it};
      if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) check(r, "vkAllocateDescriptorSets");
    }
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * max_bindings_};
    VkDescriptorPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pool_info.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
    pool_info.maxSets = kSetsPerPool;
    pool_info.poolSizeCount = 1;
    pool_info.pPoolSizes = &size;
    VkDescriptorPool pool;
    check(vk_.vkCreateDescriptorPool(device_, &pool_info, nullptr, &pool), "vkCreateDescriptorPool");
    descriptor_pools_.push_back(pool);
    info.descriptorPool = pool;
    VkDescriptorSet set;
    check(vk_.vkAllocateDescriptorSets(device_, &info, &set), "vkAllocateDescriptorSets");
    return {set, pool};
  }

  void barrier(VkCommandBuffer c, VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage, VkAccessFlags dst) {
    VkMemoryBarrier b{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b.srcAccessMask = src;
    b.dstAccessMask = dst;
    vk_.vkCmdPipelineBarrier(c, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
  }

  void* library_ = nullptr;
  VulkanApi vk_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_ = 0;
  VkPhysicalDeviceMemoryProperties memory_{};
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  VkPipelineCache pipeline_cache_ = VK_NULL_HANDLE;
  std::string cache_path_;
  bool cache_dirty_ = false;
  DeviceSpec spec_;
  std::set<uint32_t> supported_;  // SPIR-V capabilities the enabled features allow
  uint32_t max_bindings_ = 0, max_push_bytes_ = 0;
  uint64_t loop_limit_ = 0;  // loop iterations per invocation the driver runs correctly; 0: no limit
  std::mutex mu_;  // the queue, the pools and the free lists
  std::deque<Submission> in_flight_;
  std::vector<VkFence> free_fences_;
  std::vector<VkCommandBuffer> free_commands_;
  std::vector<VkDescriptorPool> descriptor_pools_;
};

VulkanProgram::VulkanProgram(VulkanDevice& device, ModuleInfo info)
    : Program(device.spec(), info.entry), device_(device), info_(std::move(info)) {
  const VulkanApi& vk = device_.api();
  const std::string& name = info_.entry;
  if (info_.bindings > device_.max_bindings())
    throw CompileError("VULKAN", name, cat("the kernel binds ", info_.bindings, " buffers; ", device_.spec().arch,
                                           " allows ", device_.max_bindings(), " storage buffers per kernel"), disassemble(info_.words));
  if (info_.push_members * 8 > device_.max_push_bytes())
    throw CompileError("VULKAN", name, cat("the kernel has ", info_.push_members, " variables (8 bytes of push constants each); ",
                                           device_.spec().arch, " allows ", device_.max_push_bytes(), " bytes"), disassemble(info_.words));
  VkShaderModuleCreateInfo module{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module.codeSize = info_.words.size() * 4;
  module.pCode = info_.words.data();
  VkResult r = vk.vkCreateShaderModule(device_.device(), &module, nullptr, &module_);
  if (r != VK_SUCCESS)
    throw CompileError("VULKAN", name, cat("vkCreateShaderModule failed: ", result_name(r)), disassemble(info_.words));
  std::vector<VkDescriptorSetLayoutBinding> bindings(info_.bindings);
  for (uint32_t i = 0; i < info_.bindings; ++i)
    bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo set{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set.bindingCount = info_.bindings;
  set.pBindings = bindings.data();
  check(vk.vkCreateDescriptorSetLayout(device_.device(), &set, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");
  VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, info_.push_members * 8};
  VkPipelineLayoutCreateInfo layout{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout.setLayoutCount = 1;
  layout.pSetLayouts = &set_layout_;
  layout.pushConstantRangeCount = info_.push_members > 0 ? 1 : 0;
  layout.pPushConstantRanges = &push;
  check(vk.vkCreatePipelineLayout(device_.device(), &layout, nullptr, &layout_), "vkCreatePipelineLayout");
  VkComputePipelineCreateInfo pipeline{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  pipeline.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  pipeline.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pipeline.stage.module = module_;
  pipeline.stage.pName = info_.entry.c_str();
  pipeline.layout = layout_;
  pipeline_ = device_.create_pipeline(pipeline, info_);
}

VulkanProgram::~VulkanProgram() {
  device_.synchronize();
  const VulkanApi& vk = device_.api();
  vk.vkDestroyPipeline(device_.device(), pipeline_, nullptr);
  vk.vkDestroyPipelineLayout(device_.device(), layout_, nullptr);
  vk.vkDestroyDescriptorSetLayout(device_.device(), set_layout_, nullptr);
  vk.vkDestroyShaderModule(device_.device(), module_, nullptr);
}

double VulkanProgram::run(std::span<const RawBuffer> bufs, std::span<const int64_t> vars, const LaunchDims& dims, bool timed) {
  const std::string& name = info_.entry;
  if (bufs.size() < info_.bindings)
    throw Error(cat("VULKAN: launch of kernel ", name, " with ", bufs.size(), " buffers; the kernel uses ", info_.bindings));
  for (uint32_t i = 0; i < info_.bindings; ++i)
    if (bufs[i].handle == nullptr) throw Error(cat("VULKAN: launch of kernel ", name, ": buffer ", i, " is not allocated"));
  if (vars.size() != info_.push_members)
    throw Error(cat("VULKAN: launch of kernel ", name, " with ", vars.size(), " variable values; the kernel has ", info_.push_members));
  for (int d = 0; d < 3; ++d)
    if (dims.local[d] != static_cast<int64_t>(info_.local[d]))
      throw Error(cat("VULKAN: launch of kernel ", name, " with local[", d, "] = ", dims.local[d], "; the module was rendered for a "
                      "workgroup size of ", info_.local[0], "x", info_.local[1], "x", info_.local[2], " (its lidx SPECIALs)"));
  auto start = std::chrono::steady_clock::now();
  VkFence fence = device_.submit(pipeline_, layout_, set_layout_, bufs, info_.bindings, vars, dims);
  if (!timed) return 0.0;
  device_.wait(fence);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::unique_ptr<Device> make_vulkan_device() {
  auto device = std::make_unique<VulkanDevice>();
  // The registry keeps its devices until exit: save new pipelines then, while the driver is still loaded.
  static VulkanDevice* saved = nullptr;
  saved = device.get();
  std::atexit([] {
    if (saved) saved->save_pipeline_cache();
  });
  return device;
}

}  // namespace kiln
