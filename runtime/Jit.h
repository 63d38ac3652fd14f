// Run-time compilation of the generated HIP kernels: NVRTC (NVIDIA) and hipRTC (AMD),
// both dlopen'ed, so nothing here is needed to start tlc; a disk cache; parallel builds.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tlc {

class JitCompiler {
public:
  virtual ~JitCompiler() = default;
  virtual std::string name() const = 0;     // "nvrtc" or "hiprtc"
  virtual std::string version() const = 0;  // e.g. "nvrtc 13.0"
  // Compiles `source` for `arch` (sm_90, gfx90a) to a loadable binary (cubin / code
  // object). On failure returns false and puts the compiler's log in `log`.
  virtual bool compile(const std::string &source, const std::string &fileName, const std::string &arch,
                       const std::vector<std::string> &options, std::string &binary, std::string &log) const = 0;
};

// Throw tlc::Error saying which libraries were looked for when the library is absent.
// NVRTC: $TLC_NVRTC, libnvrtc.so.13/.12, also under $CUDA_HOME and /usr/local/cuda.
// hipRTC: $TLC_HIPRTC, libhiprtc.so(.6/.7) (ROCm 6+), libamdhip64.so(.5/.6) (ROCm 5).
std::unique_ptr<JitCompiler> createNvrtcCompiler();
std::unique_ptr<JitCompiler> createHiprtcCompiler();

struct JitSource {
  std::string entry;   // names the kernel in messages and files
  std::string source;
};

struct JitOptions {
  std::string arch;
  std::vector<std::string> compilerOptions;
  bool useCache = true;
  std::string cacheDir;  // empty: jitCacheDir()
  int threads = 0;       // 0: one per hardware thread
  bool progress = true;  // print a progress line to stderr once JIT takes over a second
};

struct JitStats {
  int compiled = 0, cached = 0;
  double seconds = 0;
};

// TLC_CACHE_DIR, else $XDG_CACHE_HOME/tlc, else ~/.cache/tlc.
std::string jitCacheDir();

// Compiles every source (each distinct one once) in parallel, through the cache; the
// result holds one binary per source, in order. A failure throws tlc::Error with the
// kernel name, the compiler log and the path where the failing source was written.
std::vector<std::string> jitCompileAll(const JitCompiler &compiler, const std::vector<JitSource> &sources,
                                       const JitOptions &options, JitStats *stats = nullptr);

// 128-bit content hash as 32 hex digits (the cache key).
std::string contentHash(const std::string &text);

} // namespace tlc
