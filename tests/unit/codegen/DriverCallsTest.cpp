// Every driver call in runtime/GpuDriverCalls.def is where the list says: each CUDA name
// in the CUDA driver (its stub library, which the toolkit ships for linking on machines
// without a GPU) and each HIP name in libamdhip64. A misspelt name would otherwise show
// only on a GPU machine, as a device that does not open.
#include <dlfcn.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tlc {
namespace {

struct DriverCall {
  const char *slot, *cuda, *hip;
};

const std::vector<DriverCall> &driverCalls() {
  static const std::vector<DriverCall> calls = {
#define TLC_GPU_CALL(slot, result, parameters, cuda, hip, need) {#slot, cuda, hip},
#include "runtime/GpuDriverCalls.def"
#undef TLC_GPU_CALL
  };
  return calls;
}

void *openFirst(const std::vector<std::string> &paths) {
  for (const std::string &path : paths)
    if (void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return library;
  return nullptr;
}

// Each alternative of "a|b" that the library lacks.
std::vector<std::string> missingNames(void *library, const std::string &names) {
  std::vector<std::string> missing;
  for (size_t begin = 0; !names.empty() && begin <= names.size();) {
    size_t end = std::min(names.find('|', begin), names.size());
    std::string name = names.substr(begin, end - begin);
    if (!dlsym(library, name.c_str())) missing.push_back(name);
    begin = end + 1;
  }
  return missing;
}

TEST(DriverCalls, EveryCudaNameIsInTheCudaDriver) {
  const char *home = std::getenv("CUDA_HOME");
  void *library = openFirst({std::string(home ? home : "/usr/local/cuda") + "/lib64/stubs/libcuda.so",
                             "/usr/local/cuda/lib64/stubs/libcuda.so"});
  ASSERT_NE(library, nullptr) << "the CUDA toolkit's driver stub (lib64/stubs/libcuda.so) must be installed";
  for (const DriverCall &call : driverCalls())
    for (const std::string &name : missingNames(library, call.cuda)) ADD_FAILURE() << call.slot << ": " << name;
}

TEST(DriverCalls, EveryHipNameIsInTheHipRuntime) {
  void *library = openFirst({"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"});
  ASSERT_NE(library, nullptr) << "libamdhip64 (libamdhip64-dev) must be installed";
  for (const DriverCall &call : driverCalls())
    for (const std::string &name : missingNames(library, call.hip)) ADD_FAILURE() << call.slot << ": " << name;
}

} // namespace
} // namespace tlc
