// A host program's GPU memory and streams, handed to a backend without copies through
// the host: the request of Backend::forwardOnDevice, and what a backend tells of the
// device it runs on. Handles are the vendor API's own, carried as void * so that no
// vendor header is needed here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tlc {

// A stream of the GPU a backend runs on: a cudaStream_t (the same handle as the driver
// API's CUstream) on NVIDIA, a hipStream_t on AMD. In a DeviceForward, null is that API's
// legacy default stream; in BackendOptions, null asks for a stream of the backend's own.
struct DeviceStream {
  void *handle = nullptr;
};

// `size` elements of device memory at `data`, owned by the caller: memory from cudaMalloc,
// cuMemAlloc, hipMalloc or an allocator built on them (managed memory too) on the
// backend's device, on CUDA in its primary context (the CUDA runtime's); not host
// memory, pinned or not.
template <class T> struct DeviceSpan {
  T *data = nullptr;
  size_t size = 0;
};

// The buffers and stream of one forward on the device.
struct DeviceForward {
  DeviceSpan<const int32_t> tokenIds;  // [batch * seq], row-major
  DeviceSpan<float> logits;            // [batch, seq, vocab], fp32 (bf16 logits widened)
  float *loss = nullptr;               // optional: one float, the next-token cross-entropy
  DeviceStream stream;                 // where the forward is enqueued
};

// The device a backend runs on, for a host program that shares it.
struct DeviceInfo {
  std::string backend;      // "cuda", "hip" or "cpu"
  std::string name;         // "NVIDIA H100 80GB HBM3"; "cpu" for the CPU
  std::string arch;         // "sm_90a", "gfx90a"; empty for the CPU
  int multiprocessors = 0;  // SMs (CUs); 0 for the CPU
  int ordinal = -1;         // the device's number in the vendor API (cudaSetDevice, hipSetDevice); -1: the CPU
  void *context = nullptr;  // CUDA: the device's primary context (CUcontext), the one the CUDA runtime API uses
                            // too, so the host's allocations and streams are tlc's; HIP and the CPU: null
  DeviceStream stream;      // the stream the backend's own work runs on (BackendOptions::stream, or one of
                            // its own); null for the CPU
};

} // namespace tlc
