#include "runtime/Jit.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "runtime/Error.h"
#include "runtime/MappedFile.h"
#include "runtime/OutputFile.h"

namespace tlc {
namespace {

// Opens the first library of `names` that loads; throws naming all of them otherwise.
void *openLibrary(const std::vector<std::string> &names, const std::string &what) {
  std::string tried;
  for (const std::string &name : names) {
    if (name.empty()) continue;
    if (void *handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return handle;
    tried += "\n  " + name + ": " + dlerror();
  }
  throw Error(fmt::format("{} is not available; tried:{}", what, tried));
}

template <typename F> F symbol(void *library, const char *name, const std::string &what) {
  void *address = dlsym(library, name);
  if (!address) throw Error(fmt::format("{}: symbol '{}' is missing from the library", what, name));
  return reinterpret_cast<F>(address);
}

std::string envOr(const char *name, const std::string &fallback = "") {
  const char *value = std::getenv(name);
  return value && *value ? value : fallback;
}

std::vector<std::string> splitWords(const std::string &text) {
  std::vector<std::string> words;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) words.push_back(word);
  return words;
}

// ---- NVRTC and hipRTC -------------------------------------------------------------

// NVRTC and hipRTC have the same API under two prefixes; only the library, the code
// getters and the arch option differ.
struct RtcFlavor {
  std::string prefix, what, codeSize, code;
  std::vector<std::string> libraries;
  std::vector<std::string> defaultOptions;  // the arch option is appended
  std::string archOption;
  bool serialize;  // hipRTC of ROCm 5 is not safe to run from several threads at once
};

class Rtc : public JitCompiler {
  using Program = void *;
  using CreateFn = int (*)(Program *, const char *, const char *, int, const char *const *, const char *const *);
  using CompileFn = int (*)(Program, int, const char *const *);
  using SizeFn = int (*)(Program, size_t *);
  using GetFn = int (*)(Program, char *);
  using DestroyFn = int (*)(Program *);
  using VersionFn = int (*)(int *, int *);
  using ErrorFn = const char *(*)(int);

public:
  explicit Rtc(RtcFlavor flavor) : flavor_(std::move(flavor)) {
    library_ = openLibrary(flavor_.libraries, flavor_.what);
    auto get = [&](auto &slot, const std::string &name) {
      slot = symbol<std::decay_t<decltype(slot)>>(library_, name.c_str(), flavor_.what);
    };
    const std::string &p = flavor_.prefix;
    get(create_, p + "CreateProgram");
    get(compile_, p + "CompileProgram");
    get(logSize_, p + "GetProgramLogSize");
    get(log_, p + "GetProgramLog");
    get(codeSize_, flavor_.codeSize);
    get(code_, flavor_.code);
    get(destroy_, p + "DestroyProgram");
    get(error_, p + "GetErrorString");
    VersionFn versionFn;
    get(versionFn, p + "Version");
    int major = 0, minor = 0;
    versionFn(&major, &minor);
    version_ = fmt::format("{} {}.{}", p, major, minor);
  }
  std::string name() const override { return flavor_.prefix; }
  std::string version() const override { return version_; }

  bool compile(const std::string &source, const std::string &fileName, const std::string &arch,
               const std::vector<std::string> &options, std::string &binary, std::string &log) const override {
    std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
    if (flavor_.serialize) lock.lock();
    Program program = nullptr;
    int status = create_(&program, source.c_str(), fileName.c_str(), 0, nullptr, nullptr);
    if (status) {
      log = fmt::format("{}CreateProgram: {}", flavor_.prefix, error_(status));
      return false;
    }
    std::vector<std::string> all = flavor_.defaultOptions;
    all.push_back(flavor_.archOption + arch);
    all.insert(all.end(), options.begin(), options.end());
    std::vector<const char *> pointers;
    for (const std::string &option : all) pointers.push_back(option.c_str());
    status = compile_(program, int(pointers.size()), pointers.data());
    size_t size = 0;
    logSize_(program, &size);
    log.assign(size, '\0');
    if (size) log_(program, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    bool ok = status == 0;
    if (ok) {
      codeSize_(program, &size);
      binary.assign(size, '\0');
      ok = size > 0 && code_(program, binary.data()) == 0;
      if (!ok && log.empty()) log = fmt::format("{} returned no code", flavor_.code);
    } else if (log.empty()) {
      log = fmt::format("{}CompileProgram: {}", flavor_.prefix, error_(status));
    }
    destroy_(&program);
    return ok;
  }

private:
  RtcFlavor flavor_;
  void *library_ = nullptr;
  CreateFn create_;
  CompileFn compile_;
  SizeFn logSize_, codeSize_;
  GetFn log_, code_;
  DestroyFn destroy_;
  ErrorFn error_;
  std::string version_;
  mutable std::mutex mutex_;
};

// A cached binary, or false (no file, or one that is not a regular file).
bool readFile(const std::string &path, std::string &contents) {
  try {
    MappedFile file(path, "JIT cache file");
    contents.assign(file.data(), file.size());
    return true;
  } catch (const Error &) {
    return false;
  }
}

void makeDirectories(const std::string &path) {
  for (size_t slash = path.find('/', 1); ; slash = path.find('/', slash + 1)) {
    ::mkdir(path.substr(0, slash).c_str(), 0777);
    if (slash == std::string::npos) break;
  }
}

// Readers see the whole file or none, even when several processes fill the cache at
// once; a cache that cannot be written is not an error, only slower next time.
bool writeAtomically(const std::string &path, const std::string &contents) {
  try {
    writeFileAtomically(path, contents, "JIT cache file");
    return true;
  } catch (const Error &) {
    return false;
  }
}

// Where a failing source goes so the user can read and recompile it.
std::string saveFailedSource(const std::string &cacheDir, const JitSource &source) {
  for (const std::string &directory : {cacheDir + "/failed", std::string("/tmp")}) {
    makeDirectories(directory);
    std::string path = directory + "/" + source.entry + ".hip";
    if (writeAtomically(path, source.source)) return path;
  }
  return "(could not be written)";
}

} // namespace

std::unique_ptr<JitCompiler> createNvrtcCompiler() {
  std::string cudaHome = envOr("CUDA_HOME", "/usr/local/cuda");
  return std::make_unique<Rtc>(RtcFlavor{
      "nvrtc", "NVRTC (the CUDA run-time compiler)", "nvrtcGetCUBINSize", "nvrtcGetCUBIN",
      {envOr("TLC_NVRTC"), "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", cudaHome + "/lib64/libnvrtc.so.13",
       cudaHome + "/lib64/libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so"},
      {"-std=c++17", "-default-device"}, "--gpu-architecture=", false});
}

std::unique_ptr<JitCompiler> createHiprtcCompiler() {
  // ROCm 6 and later ship hipRTC on its own; ROCm 5 keeps it inside libamdhip64.
  return std::make_unique<Rtc>(RtcFlavor{
      "hiprtc", "hipRTC (the HIP run-time compiler)", "hiprtcGetCodeSize", "hiprtcGetCode",
      {envOr("TLC_HIPRTC"), "libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "/opt/rocm/lib/libhiprtc.so",
       "libamdhip64.so.5", "libamdhip64.so", "libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so"},
      {"-O3"}, "--offload-arch=", true});
}

std::string jitCacheDir() {
  std::string dir = envOr("TLC_CACHE_DIR");
  if (!dir.empty()) return dir;
  std::string xdg = envOr("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/tlc";
  return envOr("HOME", "/tmp") + "/.cache/tlc";
}

std::string contentHash(const std::string &text) {
  // Two independent 64-bit FNV-1a style streams with a final avalanche each.
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  for (unsigned char c : text) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 0x100000001b3ull + 0x7f4a7c15ull;
    b ^= b >> 29;
  }
  auto mix = [](uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
  };
  return fmt::format("{:016x}{:016x}", mix(a), mix(b ^ text.size()));
}

namespace {

// Each distinct source once: `unique` holds the first index of each, `slot` each
// source's place among them.
struct DistinctSources {
  std::vector<size_t> unique, slot;
  explicit DistinctSources(const std::vector<JitSource> &sources) : slot(sources.size()) {
    std::map<std::string, size_t> firstOf;
    for (size_t i = 0; i < sources.size(); ++i) {
      auto [it, inserted] = firstOf.emplace(sources[i].source, unique.size());
      if (inserted) unique.push_back(i);
      slot[i] = it->second;
    }
  }
};

// The first three compile errors (and how many more), or "" when none failed.
std::string failuresOf(const std::vector<std::string> &errors) {
  std::string failures;
  int failed = 0;
  for (const std::string &error : errors)
    if (!error.empty() && failed++ < 3) failures += (failures.empty() ? "" : "\n\n") + error;
  if (failed > 3) failures += fmt::format("\n\n(and {} more kernels failed)", failed - 3);
  return failures;
}

} // namespace

std::vector<std::string> jitCompileAll(const JitCompiler &compiler, const std::vector<JitSource> &sources,
                                       const JitOptions &options, JitStats *stats) {
  auto start = std::chrono::steady_clock::now();
  std::string cacheDir = options.cacheDir.empty() ? jitCacheDir() : options.cacheDir;
  if (options.useCache) makeDirectories(cacheDir);
  // TLC_JIT_OPTIONS adds compiler options (say -D flags) for experiments; they are part of the cache key.
  JitOptions withExtra = options;
  for (const std::string &option : splitWords(envOr("TLC_JIT_OPTIONS"))) withExtra.compilerOptions.push_back(option);
  std::string optionText;
  for (const std::string &option : withExtra.compilerOptions) optionText += option + " ";

  const DistinctSources distinct(sources);
  const std::vector<size_t> &unique = distinct.unique;
  std::vector<std::string> binaries(unique.size());
  std::vector<std::string> errors(unique.size());
  std::atomic<size_t> next{0};
  std::atomic<int> done{0}, cached{0};
  std::mutex printMutex;
  bool interactive = ::isatty(2);

  auto report = [&](bool final) {
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!options.progress || seconds < 1.0) return;
    std::lock_guard<std::mutex> lock(printMutex);
    if (!interactive && !final) return;
    std::fprintf(stderr, "%stlc: JIT %s for %s: %d/%zu kernels (%d from cache), %.1f s%s",
                 interactive ? "\r" : "", compiler.version().c_str(), options.arch.c_str(), done.load(),
                 unique.size(), cached.load(), seconds, final ? "\n" : "");
    std::fflush(stderr);
  };

  // A source's binary from the cache (keyed by the compiler, arch, options and source), or
  // compiled and cached; a failure's message kept for the end.
  auto compileOne = [&](size_t u) {
    const JitSource &source = sources[unique[u]];
    std::string key = contentHash(compiler.version() + "\n" + options.arch + "\n" + optionText + "\n" + source.source);
    std::string path = fmt::format("{}/{}-{}.{}", cacheDir, key, options.arch, compiler.name() == "nvrtc" ? "cubin" : "hsaco");
    if (options.useCache && readFile(path, binaries[u]) && !binaries[u].empty()) {
      ++cached;
      return;
    }
    std::string log;
    if (!compiler.compile(source.source, source.entry + ".hip", options.arch, withExtra.compilerOptions, binaries[u], log))
      errors[u] = fmt::format("{} failed to compile kernel '{}' for {}:\n{}\nthe source is in {}", compiler.version(),
                              source.entry, options.arch, log, saveFailedSource(cacheDir, source));
    else if (options.useCache)
      writeAtomically(path, binaries[u]);
  };
  auto worker = [&] {
    for (size_t u; (u = next.fetch_add(1)) < unique.size();) {
      compileOne(u);
      ++done;
      report(false);
    }
  };
  int threads = options.threads > 0 ? options.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, int(std::max<size_t>(1, unique.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread &thread : pool) thread.join();
  report(true);

  if (std::string failures = failuresOf(errors); !failures.empty()) throw Error(failures);
  if (stats) {
    stats->cached = cached.load();
    stats->compiled = int(unique.size()) - stats->cached;
    stats->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::vector<std::string> result(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) result[i] = binaries[distinct.slot[i]];
  return result;
}

} // namespace tlc
