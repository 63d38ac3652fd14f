// What a CPU backend keeps from one run to the next (State values: the KV cache), by
// value name. The backends of one generator share it, so the prefill's Program and the
// decode's read and write one cache.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/Backend.h"

namespace tlc {

struct CpuState {
  std::map<std::string, std::vector<std::byte>> buffers;  // each in its value's dtype
};

std::unique_ptr<Backend> createCpuBackend(int threads, std::shared_ptr<CpuState> state);

} // namespace tlc
