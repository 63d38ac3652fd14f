// The Program: the one contract between the compiler and the runtime.
//
// The compiler lowers an optimized `tl` module to a Program; the runtime loads it
// (from memory or from `program.json`) and runs it. Nothing here knows about MLIR.
//
// A Program is a list of values (every tensor the forward touches, each with dtype,
// shape and storage class) and a list of kernels in launch order. Each kernel names
// the buffers it reads and writes and the sequence of ops it computes; a backend runs
// a kernel by executing those ops (the CPU reference) or by launching its generated
// source. Values private to one kernel (class `Local`) never reach device memory: they
// are what fusion keeps in registers and shared memory.
#pragma once

#include <tlc/Export.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace tlc {

enum class DType { F32, BF16, I32 };

TLC_API const char *dtypeName(DType dtype);          // "f32", "bf16", "i32"
TLC_API DType parseDType(const std::string &name);   // throws tlc::Error on an unknown name
TLC_API int64_t dtypeBytes(DType dtype);

// Where a value lives.
enum class Storage {
  Input,      // fed by the caller (token ids); lives in the arena for the whole run
  Output,     // returned to the caller (logits, loss); lives in the arena until the end
  Weight,     // a parameter, loaded once; kept outside the arena
  Activation, // an intermediate in device memory; placed in the arena by the planner
  View,       // a reshape of another value: same bytes, different shape, no kernel
  Local,      // private to one kernel (kept in registers/shared memory on a GPU)
  State,      // kept by the backend from one run to the next, zeros at load (the KV cache);
              // only kv_cache_store writes it, in place, through views of it
};

TLC_API const char *storageName(Storage storage);
TLC_API Storage parseStorage(const std::string &name);

struct Value {
  int id = 0;
  std::string name;           // readable name, e.g. "layers.0.attn_norm"
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  Storage storage = Storage::Activation;
  // Weight: checkpoint keys (Hugging Face names) concatenated along dim 0, in order.
  // One key for a plain weight; several after QKV merge or gate/up merge.
  std::vector<std::string> weightKeys;
  // Weight: a 1-D parameter multiplying column k of every row by its element k, once
  // when the weights are loaded (an RMSNorm gain folded into the next GEMM); empty for none.
  std::string columnScaleKey;
  int viewOf = -1;            // View: the value whose bytes this one reinterprets
  int64_t offset = -1;        // Input/Output/Activation: byte offset in the arena

  TLC_API int64_t numElements() const;
  int64_t bytes() const { return numElements() * dtypeBytes(dtype); }
};

using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

// Which op an OpRecord computes: one kind per op of runtime/Ops.def, each the tl op of
// the same name (the enumerators are in runtime/OpKind.h; here, names are what a caller
// reads and writes).
enum class OpKind : uint16_t;

TLC_API const char *opKindName(OpKind kind);          // the tl op without its prefix: "linear"
TLC_API OpKind parseOpKind(const std::string &name);  // throws tlc::Error on an unknown op

// One op inside a kernel. The reference semantics of every op are in runtime/CpuOps.cpp.
struct OpRecord {
  OpKind kind{};
  std::vector<int> operands;  // value ids
  std::vector<int> results;   // value ids
  std::map<std::string, AttrValue> attrs;

  TLC_API int64_t intAttr(const std::string &key) const;
  TLC_API double floatAttr(const std::string &key) const;
  TLC_API const std::string &stringAttr(const std::string &key) const;
  TLC_API const std::vector<int64_t> &intsAttr(const std::string &key) const;
};

// Provenance: an op of the model file, as the compiler parsed it. Every op keeps its
// location through fusion (MLIR's fused locations), so each kernel can say which ops
// of the file it computes (Kernel::origins); `tlc --emit=hip` lists them in each
// kernel's header, and `tlc report` draws them.
struct SourceOp {
  int line = 0, column = 0;   // in Program::sourceFile
  std::string text;           // how its line begins: "%q_proj = tl.linear"
};

// What a kernel does for a source op: computes it (the forward), computes part of its
// gradient (the backward), computes it again for the backward, or updates the
// parameter it declares (the optimizer).
enum class OriginRole { Computes, Gradient, Recomputes, Updates };

TLC_API const char *originRoleName(OriginRole role);           // "computes", "gradient", "recomputes", "updates"
TLC_API OriginRole parseOriginRole(const std::string &name);   // throws tlc::Error on an unknown name

struct OpOrigin {
  int op = -1;                            // index in Program::sourceOps
  OriginRole role = OriginRole::Computes;
};

// How a backend launches a kernel: a 1-D grid of blocks.
struct KernelLaunch {
  int64_t gridBlocks = 0;
  int blockThreads = 0;
  int64_t sharedBytes = 0;    // dynamic shared memory per block
  // Weight values among the kernel's inputs that it reads, on this path, as bf16 parts:
  // every 32 elements as their 32 bf16 high parts h = bf16(x), then their 32 residuals
  // bf16(x - h) (runtime/Bf16Parts.h). The backend stores such a weight that way, split
  // once at load, where it would otherwise be split in every tile (sm_90a's 3xBF16 GEMMs).
  std::vector<int> bf16PartsInputs;
};

// One block of a persistent kernel's part, run as a task (O3: the forward as one kernel).
struct Task {
  int part = 0;               // which of Kernel::parts
  int64_t block = 0;          // its block of the part's grid on Kernel::taskPath
  std::vector<int> waits;     // earlier tasks (indices into Kernel::tasks) it waits for
  // Arena bytes [begin, end) it may write: what the CPU backend commits of the part it
  // computes when it runs the task (a task that ran too early leaves wrong values).
  std::vector<std::pair<int64_t, int64_t>> writes;
  double cost = 0;            // the schedule's estimate of its time, in µs
};

struct Kernel {
  std::string name;           // says what it computes: tl_linear_bf16_1024x512x512
  std::vector<int> inputs;    // values read from memory (no Locals)
  std::vector<int> outputs;   // values written to memory (no Locals)
  std::vector<OpRecord> ops;  // what it computes, in order
  int64_t flops = 0;          // arithmetic work, counted as in the cost model
  int64_t minBytes = 0;       // bytes it must move at least: inputs (a gathered table: its rows read) and outputs once
  int layer = -1;             // transformer block it belongs to, -1 outside blocks
  std::vector<OpOrigin> origins;  // the source ops it computes (or differentiates, ...), by op

  // GPU code, set by the code generator (compiler/codegen/Emitter.h); empty until then.
  std::string entry;          // the kernel function in `source` (Kernel::name unless taken)
  std::string source;         // HIP-dialect C++ that hipRTC and NVRTC both compile
  // Launch shape by backend ("cuda", "hip"), or by backend and arch ("cuda:sm_90a"),
  // which takes precedence: the source takes a different code path on each (wgmma on
  // sm_90a, mma.sync on other NVIDIA GPUs, MFMA or FMAs with hipRTC).
  std::map<std::string, KernelLaunch> launch;
  // May start before the kernel ahead of it has finished (programmatic dependent launch,
  // where the device has it): it waits inside for its producers before reading them.
  bool chained = false;
  int64_t workspaceBytes = 0; // scratch it needs in the per-launch workspace
  int64_t syncWords = 0;      // zeroed 32-bit counters it uses (from the start) and leaves zeroed

  // A persistent kernel (O3): one launch of `workers` blocks that runs its parts' blocks as
  // tasks. The parts are the kernels it replaces, in order, each runnable as a launch of its
  // own (where the device is not the one the tasks were made for); `tasks` are their blocks
  // on `taskPath` (a launch key, "cuda:sm_90a") in a topological order; each worker runs its
  // tasks in order. A part's workspace and counters start at its offsets in the kernel's
  // (parts run at once). Its own counters follow the parts' (persistentSyncLayout).
  std::vector<Kernel> parts;
  std::vector<Task> tasks;
  std::vector<std::vector<int>> workers;
  std::string taskPath;
  std::vector<int64_t> partWorkspaceOffsets, partSyncOffsets;
};

// Kernel::launch's shape for a backend on an arch, or null when it has none.
const KernelLaunch *findLaunch(const Kernel &kernel, const std::string &backend, const std::string &arch);

// Where a persistent kernel's own counters lie among its sync words, after its parts':
// a done word a task from `done`, the three control words from `control`, a counter a part
// (its tasks finished) from `partDone`; `words` in all.
struct PersistentSyncLayout {
  int64_t done = 0, control = 0, partDone = 0, words = 0;
};
PersistentSyncLayout persistentSyncLayout(const Kernel &kernel);

// Where a persistent kernel's task waits for every task of a part (each waited for, or run
// before on its own worker), it can poll that part's counter instead of a done word a task.
// Only where more tasks are left than the lanes that poll at once (fewer cost one round of
// polls anyway) and the part's mean task estimate is at least minTaskUs: measured, counters
// sped up the 1.1B's decode step (parts of 5.4 µs a task and more) and slowed the
// workshop's (its gate/up, 3.9 µs), whose cause is not yet separated (bench/RESULTS.md).
struct PartCounterRule {
  int waitLanes = 32;
  double minTaskUs = 5.0;
  static PartCounterRule never() { return {std::numeric_limits<int>::max(), 0.0}; }
};
// The macro a persistent kernel's source defines where some part is counted.
inline constexpr const char *kPartCountersDefine = "#define TL_PART_COUNTERS 1\n";

// The waits a persistent kernel's device table holds. It never waits for more than
// Task::waits implies.
struct DeviceWaits {
  // Per task: Task::waits, where the rule allows written as one wait -(part + 1) for the
  // part's counter (done once it holds epoch times the part's tasks).
  std::vector<std::vector<int>> waits;
  // Per part: its number of tasks where some wait polls its counter (they count), else 0.
  std::vector<int> partTasks;
  bool countsParts() const;
};
DeviceWaits deviceWaits(const Kernel &kernel, const PartCounterRule &rule = {});

// A model parameter as stored in a checkpoint.
struct Parameter {
  std::string key;            // Hugging Face name: model.layers.0.self_attn.q_proj.weight
  std::vector<int64_t> shape;
  std::string init;           // seeded init: "normal" (std 0.02) or "ones" (norm gains)
};

// What running a Program does: a forward (token ids in, logits and loss out), a
// training step (the forward, then the backward and an optimizer update of the
// parameters, which the backend keeps between steps: Backend::trainStep), or a step of
// generation (tl-kv-cache): a prefill (a prompt's ids [batch, seq] in, logits out, the KV
// cache written from position 0) or a decode (ids [batch, 1] and each sequence's position
// [batch] in, logits out), both reading and writing the cache the backend keeps (State).
enum class ProgramKind { Forward, TrainStep, Prefill, Decode };

TLC_API const char *programKindName(ProgramKind kind);          // "forward", "train_step", "prefill", "decode"
TLC_API ProgramKind parseProgramKind(const std::string &name);  // throws tlc::Error on an unknown name

// How f32 matrix products are computed where the hardware offers a choice, by the names of
// PyTorch's torch.set_float32_matmul_precision: Highest, fp32 FMAs (exact products);
// High, NVIDIA tensor cores with each operand split into a tf32 high part and residual
// and three products accumulated in fp32 (3xTF32, about fp32's accuracy); Medium, one
// tensor-core product of tf32-rounded operands (plain TF32). bf16 models multiply bf16.
enum class MatmulPrecision { Highest, High, Medium };

TLC_API const char *matmulPrecisionName(MatmulPrecision precision);  // "highest", "high", "medium"
TLC_API MatmulPrecision parseMatmulPrecision(const std::string &name);  // throws tlc::Error on an unknown name

struct Program {
  std::string model;          // e.g. "workshop"
  ProgramKind kind = ProgramKind::Forward;
  int optLevel = 0;
  std::string pipeline;       // the pass pipeline that produced it
  DType dtype = DType::F32;   // storage dtype of weights and activations
  MatmulPrecision matmulPrecision = MatmulPrecision::Highest;  // of f32 matrix products
  int64_t batch = 0, seqLen = 0, vocab = 0;
  std::vector<Parameter> parameters;
  std::vector<Value> values;  // indexed by id
  std::vector<Kernel> kernels;
  std::vector<int> inputs;    // in order: token ids (and a decode's positions)
  std::vector<int> outputs;   // in order: logits, loss
  int64_t arenaBytes = 0;     // set by the memory planner
  int64_t workspaceBytes = 0; // the largest Kernel::workspaceBytes (one workspace, reused)
  // The GPU the launch shapes were chosen for (its arch and SM count; the sources also run
  // elsewhere, tuned for that), and the schedule choices forced by options ("" for none).
  std::string targetArch;
  int targetMultiprocessors = 0;
  std::string scheduleOverrides;
  // O3: why the forward runs as separate launches rather than one persistent kernel ("" if
  // it does, or the level never makes one).
  std::string persistentFallback;
  // Provenance: the model file and those of its ops the kernels name in their origins
  // (none for a model built in memory).
  std::string sourceFile;
  std::vector<SourceOp> sourceOps;

  const Value &value(int id) const { return values.at(id); }
  // The value owning `id`'s bytes (follows views).
  TLC_API const Value &storageOf(int id) const;
};

// The kernels a Program computes with, in order: its kernels, each persistent kernel's
// parts in its place.
TLC_API std::vector<const Kernel *> computeKernels(const Program &program);

// What a kernel's generated source was written for: the dtype and shape of each buffer
// it is given, in launch order, its workspace and counters, and its launch shapes. The
// code generator writes it as the source's first line (kKernelSignaturePrefix + this);
// the validator computes it again from the Program and refuses a source that disagrees
// (a program.json whose dtypes or sizes were edited while the kernels were not).
TLC_API std::string kernelSignature(const Program &program, const Kernel &kernel);
inline constexpr const char *kKernelSignaturePrefix = "// tl-signature: ";

// Checks internal consistency (ids in range, shapes present, kernels reference
// only existing values, views of the right size, sources written for the kernel's
// buffers). Throws tlc::Error naming the problem.
TLC_API void validateProgram(const Program &program);

// Serialization as readable JSON (`program.json`). Throw tlc::Error on bad input.
TLC_API std::string programToJson(const Program &program);
TLC_API Program programFromJson(const std::string &text, const std::string &origin = "<memory>");
TLC_API Program loadProgram(const std::string &path);
TLC_API void saveProgram(const Program &program, const std::string &path);

} // namespace tlc
