// The all-reduces of a data-parallel run on GPUs: NCCL on NVIDIA, RCCL on AMD, loaded
// with dlopen as the JIT compilers are (runtime/NcclCalls.def lists the calls), so tlc
// starts where neither library exists. The ranks' communicator is bootstrapped through
// their rendezvous store (runtime/Distributed.h): rank 0 draws NCCL's unique id and
// the others read it there.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/Distributed.h"
#include "runtime/Program.h"

namespace tlc {

class DeviceCollectives {
public:
  // Runs a call with the device current on the calling thread (and as it was after).
  using OnDevice = std::function<int(const std::function<int()> &)>;
  // Loads `vendor`'s library ("cuda": libnccl.so.2, "hip": librccl.so.1) and makes the
  // communicator of `ranks` on the device, through `onDevice` on a thread of its own. Throws tlc::Error saying what to install (or put on LD_LIBRARY_PATH) when the
  // library is missing, naming a rank that stopped or did not come within the ranks'
  // timeout, or the call that failed.
  DeviceCollectives(const std::string &vendor, Communicator &ranks, const OnDevice &onDevice);
  ~DeviceCollectives();
  DeviceCollectives(const DeviceCollectives &) = delete;
  DeviceCollectives &operator=(const DeviceCollectives &) = delete;

  std::string describe() const;  // "NCCL 2.27.3"

  struct Buffer {
    void *data = nullptr;  // device memory, reduced in place
    size_t count = 0;
    DType dtype = DType::F32;
  };
  // Each buffer replaced by its mean over the ranks (ncclAvg), one group of calls
  // enqueued on `stream` (captured into a graph as any launch).
  void allReduceMean(const std::vector<Buffer> &bucket, void *stream);

  // What NCCL reports of the work enqueued so far: "" while nothing failed.
  std::string asyncError();
  // Stops the communicator's work at once (a peer is gone: its kernels would wait forever).
  void abort();

private:
  struct Library;
  struct UniqueId;
  void initialize(Communicator &ranks, const UniqueId &id, const OnDevice &onDevice);
  std::unique_ptr<Library> library_;
  void *communicator_ = nullptr;
  std::string name_;
};

} // namespace tlc
