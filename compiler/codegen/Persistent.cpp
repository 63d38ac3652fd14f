#include "compiler/codegen/Persistent.h"

#include "compiler/Targets.h"
#include "compiler/codegen/Templates.h"
#include "runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>
#include <cctype>
#include <map>
#include <set>

namespace tlc::codegen {
namespace {

// std::erase_if, which C++17 lacks.
template <class Vector, class Predicate> void eraseIf(Vector &vector, Predicate predicate) {
  vector.erase(std::remove_if(vector.begin(), vector.end(), predicate), vector.end());
}

// Shared memory the kernel's static __shared__ variables may take besides the largest
// dynamic request: the parts' (reductions, flags; 8 KiB of them a block sum's partials) and
// the weight ring's barriers. NVRTC gives the 1.1B's decode kernel 8448 bytes, 8576 with the
// ring, 9984 with the ring and attention's FMA path (--attention-tile=rows).
constexpr int64_t kStaticSharedBytes = 10 << 10;

// The weight ring: slots of this size (a unit: 1024 k of 8 bf16 columns or 512 of fp32).
constexpr int64_t kRingSlotBytes = 16 << 10;
constexpr int64_t kMaxRingSlots = 16;
constexpr int64_t kRingTaskBytes = 128 << 10;

// Where a persistent kernel's weight ring lies in its dynamic shared memory (none: 0 slots).
struct WeightRing {
  int64_t slots = 0, offset = 0;
  int64_t end(int64_t shared) const { return slots > 0 ? offset + slots * kRingSlotBytes : shared; }
};

// Which tasks last wrote each byte of the arena (the tasks of one part: a kernel's blocks
// never wait for each other) and which tasks read it since.
class AccessMap {
public:
  explicit AccessMap(const std::vector<int> &partOf) : partOf_(partOf) {}

  // The tasks `task` must wait for to read [begin, end); records the read.
  void read(int64_t begin, int64_t end, int task, std::set<int> &waits) {
    visit(begin, end, [&](Segment &segment) {
      for (int writer : segment.writers)
        if (partOf_[size_t(writer)] != partOf_[size_t(task)]) waits.insert(writer);
      if (segment.readers.empty() || segment.readers.back() != task) segment.readers.push_back(task);
    });
  }

  // The tasks `task` must wait for to write [begin, end): the other parts' writers and
  // readers; records the write (its part's readers stay: a later writer waits for them).
  void write(int64_t begin, int64_t end, int task, std::set<int> &waits) {
    const int part = partOf_[size_t(task)];
    visit(begin, end, [&](Segment &segment) {
      for (const std::vector<int> *list : {&segment.writers, &segment.readers})
        for (int other : *list)
          if (partOf_[size_t(other)] != part) waits.insert(other);
      if (!segment.writers.empty() && partOf_[size_t(segment.writers.front())] == part) {
        if (segment.writers.back() != task) segment.writers.push_back(task);
      } else {
        segment.writers = {task};
      }
      eraseIf(segment.readers, [&](int reader) { return partOf_[size_t(reader)] != part; });
    });
  }

private:
  struct Segment {
    int64_t end = 0;
    std::vector<int> writers, readers;
  };

  // Makes `at` the start of a segment if a segment spans it.
  void split(int64_t at) {
    auto after = segments_.upper_bound(at);
    if (after == segments_.begin()) return;
    auto inside = std::prev(after);
    if (inside->first == at || inside->second.end <= at) return;
    Segment tail = inside->second;
    inside->second.end = at;
    segments_.emplace(at, std::move(tail));
  }

  // Calls `each` on the segments covering [begin, end), made where none was.
  template <class Each> void visit(int64_t begin, int64_t end, Each each) {
    if (begin >= end) return;
    split(begin);
    split(end);
    int64_t at = begin;
    auto it = segments_.lower_bound(begin);
    while (at < end) {
      if (it == segments_.end() || it->first > at) {  // a gap: a segment of its own
        int64_t gapEnd = it == segments_.end() ? end : std::min(end, it->first);
        it = segments_.emplace_hint(it, at, Segment{gapEnd, {}, {}});
      }
      each(it->second);
      at = it->second.end;
      ++it;
    }
  }

  const std::vector<int> &partOf_;
  std::map<int64_t, Segment> segments_;  // by first byte; disjoint
};

// The launch key whose blocks the tasks are: the machine's path.
std::string taskPath(const Machine &machine) { return machine.wgmma ? "cuda:sm_90a" : "cuda"; }

std::string identifier(std::string text) {
  for (char &c : text)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return text;
}

// A kernel's source after its prelude: its own definitions and body.
std::string bodyOf(const Kernel &kernel) {
  const std::string marker = "// ---- end of templates ----\n\n";
  size_t at = kernel.source.find(marker);
  if (at == std::string::npos) throw Error(fmt::format("code generation: kernel '{}' has no body to take", kernel.entry));
  return kernel.source.substr(at + marker.size());
}

// Each part's parameters struct sits at an offset of one block of pointers: its inputs,
// outputs, workspace and counters (the layout of <entry>_params).
std::vector<int64_t> paramOffsets(const std::vector<Kernel> &parts) {
  std::vector<int64_t> offsets;
  int64_t at = 0;
  for (const Kernel &part : parts) {
    offsets.push_back(at);
    at += int64_t(part.inputs.size() + part.outputs.size() + 2) * 8;
  }
  return offsets;
}

// The distinct bodies of a persistent kernel's parts (a 22-layer model's 100-odd parts
// share 8), in first-use order, and each part's index among them.
struct PartBodies {
  std::vector<const Kernel *> bodies;
  std::vector<int> bodyOf;
};

PartBodies partBodies(const std::vector<Kernel> &parts) {
  PartBodies result;
  for (const Kernel &part : parts) {
    auto at = std::find_if(result.bodies.begin(), result.bodies.end(),
                           [&](const Kernel *body) { return body->entry == part.entry; });
    result.bodyOf.push_back(int(at - result.bodies.begin()));
    if (at == result.bodies.end()) result.bodies.push_back(&part);
  }
  return result;
}

// The parts' dispatch: a switch over the distinct bodies, each inlined once (a switch over
// parts inlined a body a layer), and a part finds its body and its parameters' offset in
// `params` through two constant tables.
std::string partDispatch(const std::string &name, const std::vector<Kernel> &parts, const PartBodies &distinct) {
  std::vector<int64_t> offsets = paramOffsets(parts);
  std::string out = fmt::format("\n// Each part's body and the offset of its parameters in `params`.\n"
                                "__constant__ int {0}_body_of[{1}] = {{{2}}};\n"
                                "__constant__ int {0}_params_at[{1}] = {{{3}}};\n",
                                name, parts.size(), fmt::join(distinct.bodyOf, ", "), fmt::join(offsets, ", "));
  auto dispatch = [&](const char *signature, const char *suffix, const char *arguments) {
    std::string text = fmt::format("  TL_DEVICE static void {}{{\n    const unsigned char *p = params + {}_params_at[part];\n"
                                   "    switch ({}_body_of[part]) {{\n",
                                   signature, name, name);
    for (size_t b = 0; b < distinct.bodies.size(); ++b)
      text += fmt::format("    case {0}: {1}{2}(*reinterpret_cast<const {1}_params *>(p){3}); break;\n", b,
                          distinct.bodies[b]->entry, suffix, arguments);
    return text + "    }\n  }\n";
  };
  out += fmt::format("struct {}_parts {{\n", name);
  out += dispatch("run(const unsigned char *params, int part) ", "_body", "");
  out += dispatch("prefetch(const unsigned char *params, int part, int thread, int threads) ", "_prefetch",
                  ", thread, threads");
  out += "#if defined(TL_RING)\n";
  out += dispatch("produce(const unsigned char *params, int part, int block, unsigned &produced) ", "_produce",
                  ", block, produced");
  out += "#endif\n";
  return out + "};\n";
}

std::string persistentSource(const std::string &name, const Kernel &kernel, int threads, int workersPerSM,
                             const WeightRing &ring, const Program &program) {
  std::string out = fmt::format("// {}: the {} forward as one persistent kernel: {} parts, {} tasks on {} workers "
                                "(tlc --emit=schedule shows them)\n",
                                name, program.model, kernel.parts.size(), kernel.tasks.size(), kernel.workers.size());
  for (size_t p = 0; p < kernel.parts.size(); ++p) {
    const Kernel &part = kernel.parts[p];
    const KernelLaunch &launch = part.launch.count(kernel.taskPath) ? part.launch.at(kernel.taskPath) : part.launch.at("cuda");
    out += fmt::format("//   part {}: {}, {} blocks of {} threads\n", p, part.entry, launch.gridBlocks, launch.blockThreads);
  }
  out += vendorPrelude() + "#define TL_PERSISTENT 1\n";
  if (deviceWaits(kernel).countsParts())
    out += std::string("// Some waits poll a part's counter (PartCounterRule): its tasks count themselves done.\n") +
           kPartCountersDefine;
  if (ring.slots > 0)
    out += fmt::format("// The weight ring (prelude.cuh): {} slots of {} KiB after the parts' {} bytes of shared memory.\n"
                       "#define TL_RING_SLOTS {}\n#define TL_RING_SLOT_BYTES {}\n#define TL_RING_OFFSET {}\n"
                       "#define TL_RING_CONSUMER_WARPS {}\n",
                       ring.slots, kRingSlotBytes >> 10, ring.offset, ring.slots, kRingSlotBytes, ring.offset,
                       GemvTile{}.warps);
  out += assembleTemplates({"prelude.cuh", "elementwise_ops.cuh", "gemm_mma.cuh", "gemm_wgmma.cuh", "gemm_mma_tf32.cuh",
                            "gemm_wgmma_tf32.cuh", "gemm_mfma.cuh", "gemm_simt.cuh", "gemm_gemv.cuh", "attention_mma.cuh",
                            "attention_rows.cuh", "row_ops.cuh", "elementwise.cuh", "persistent.cuh"});
  out += "// ---- end of templates ----\n\n";
  PartBodies distinct = partBodies(kernel.parts);
  for (const Kernel *body : distinct.bodies) out += bodyOf(*body);
  out += partDispatch(name, kernel.parts, distinct);
  out += fmt::format("extern \"C\" __global__ void __launch_bounds__({0}, {2})\n{1}(const unsigned char *params, "
                     "tl_persistent_tables tables) {{\n  tl_persistent_worker<{1}_parts>(params, tables);\n}}\n",
                     threads, name, workersPerSM);
  return out;
}

} // namespace

std::vector<std::pair<int64_t, int64_t>> arenaBytes(const Program &program, int value, int64_t begin, int64_t end) {
  const Value &base = program.storageOf(value);
  if (base.storage == Storage::Weight || base.storage == Storage::Local || base.offset < 0) return {};
  int64_t size = dtypeBytes(base.dtype), count = program.value(value).numElements();
  begin = std::clamp<int64_t>(begin, 0, count);
  end = std::clamp<int64_t>(end, begin, count);
  if (begin == end) return {};
  return {{base.offset + begin * size, base.offset + end * size}};
}

namespace {

// Matrix-vector parts stream their weights through a ring in the shared memory the parts
// leave (at least two slots), copied by one more warp a worker (persistent.cuh v3), where a
// task's weights are more than its own loads keep in flight (kRingTaskBytes): on an H100
// the 1.1B's decode step ran faster with the ring, the workshop's slower. `shared` and
// `threads`: what the parts take.
WeightRing planWeightRing(const Program &program, const std::vector<TaskPlan> &plans, const Machine &machine,
                          int64_t shared, int threads) {
  int64_t largestTask = 0;
  for (size_t k = 0; k < plans.size(); ++k) {
    if (!plans[k].streamsWeights) continue;
    if (!plans[k].weightsConstant) return {};  // the producer copies ahead of the waits: only what nothing writes
    largestTask = std::max(largestTask, program.kernels[k].minBytes / plans[k].blocks);
  }
  if (machine.overrides.noWeightRing || largestTask < kRingTaskBytes || threads + 32 > machine.maxThreadsPerBlock)
    return {};
  WeightRing ring;
  ring.offset = (shared + 1023) / 1024 * 1024;
  const int64_t room = machine.sharedBytesPerBlock - kStaticSharedBytes - ring.offset;
  ring.slots = std::clamp<int64_t>(room / kRingSlotBytes, 0, kMaxRingSlots);
  return ring.slots >= 2 ? ring : WeightRing{};
}

// Waits: every earlier task of another part whose bytes a task reads or overwrites; and
// each task's estimate: its kernel's work shared by its blocks, at one SM's share of the
// rates, plus the fixed cost and a split tile's join.
void deriveWaits(const Program &program, const std::vector<TaskPlan> &plans, Kernel &persistent) {
  std::vector<int> partOf;
  for (const Task &task : persistent.tasks) partOf.push_back(task.part);
  AccessMap arena(partOf);
  for (size_t t = 0; t < persistent.tasks.size(); ++t) {
    Task &task = persistent.tasks[t];
    const Kernel &part = program.kernels[size_t(task.part)];
    auto valueOf = [&](int param) {
      return size_t(param) < part.inputs.size() ? part.inputs[size_t(param)]
                                                : part.outputs.at(size_t(param) - part.inputs.size());
    };
    BlockAccess access = plans[size_t(task.part)].access(task.block);
    std::set<int> waits;
    for (const ElementRange &range : access.reads)
      for (auto [begin, end] : arenaBytes(program, valueOf(range.param), range.begin, range.end))
        arena.read(begin, end, int(t), waits);
    for (const ElementRange &range : access.writes)
      for (auto [begin, end] : arenaBytes(program, valueOf(range.param), range.begin, range.end)) {
        arena.write(begin, end, int(t), waits);
        task.writes.push_back({begin, end});
      }
    task.waits.assign(waits.begin(), waits.end());
    const int64_t blocks = plans[size_t(task.part)].blocks;
    double flops = double(part.flops) / double(blocks), bytes = double(part.minBytes) / double(blocks);
    double rate = program.dtype == DType::BF16 ? kTensorFlopsPerSM : kFmaFlopsPerSM;
    task.cost = std::max(flops / rate, bytes / kBytesPerSM) * 1e6 + kTaskOverheadUs +
                (plans[size_t(task.part)].joinsSplits ? kSplitJoinUs : 0.0);
  }
}

// Each task, in order, to the worker that can start it first (its waits done, the worker
// free); among those, the one free latest, which leaves the others' time whole. A worker
// runs its tasks in order: a task of its own is done already, and of another worker's
// only the latest waited for matters.
void assignWorkers(Kernel &persistent, int workers) {
  persistent.workers.assign(size_t(workers), {});
  std::vector<double> free(size_t(workers), 0.0), finish(persistent.tasks.size(), 0.0);
  std::vector<int> workerOf(persistent.tasks.size(), 0);
  for (size_t t = 0; t < persistent.tasks.size(); ++t) {
    Task &task = persistent.tasks[t];
    double ready = 0;
    for (int wait : task.waits) ready = std::max(ready, finish[size_t(wait)]);
    int best = 0;
    for (int w = 1; w < workers; ++w) {
      double start = std::max(free[size_t(w)], ready), bestStart = std::max(free[size_t(best)], ready);
      if (start < bestStart || (start == bestStart && free[size_t(w)] > free[size_t(best)])) best = w;
    }
    finish[t] = std::max(free[size_t(best)], ready) + task.cost;
    free[size_t(best)] = finish[t];
    workerOf[t] = best;
    persistent.workers[size_t(best)].push_back(int(t));
    std::map<int, int> latest;  // worker -> its latest task waited for
    for (int wait : task.waits)
      if (workerOf[size_t(wait)] != best) latest[workerOf[size_t(wait)]] = std::max(latest[workerOf[size_t(wait)]], wait);
    task.waits.clear();
    for (const auto &[worker, wait] : latest) task.waits.push_back(wait);
    std::sort(task.waits.begin(), task.waits.end());
  }
}

} // namespace

void dropImpliedWaits(Kernel &persistent) {
  const size_t tasks = persistent.tasks.size(), workers = persistent.workers.size();
  std::vector<int> workerOf(tasks, -1), position(tasks, -1), before(tasks, -1);  // before: the worker's task before
  for (size_t w = 0; w < workers; ++w)
    for (size_t i = 0; i < persistent.workers[w].size(); ++i) {
      const int t = persistent.workers[w][i];
      workerOf[size_t(t)] = int(w), position[size_t(t)] = int(i), before[size_t(t)] = i ? persistent.workers[w][i - 1] : -1;
    }
  assert(std::find(workerOf.begin(), workerOf.end(), -1) == workerOf.end() && "every task on a worker (assignWorkers)");
  // done[t * workers + v]: the position on worker v of its latest task that is done once t
  // is (-1: none); t's own position included.
  std::vector<int> done(tasks * workers, -1);
  // Of t's predecessors, per worker: the furthest any says is done, which predecessor, and
  // the furthest the others say (a wait is implied when a predecessor other than itself
  // reaches it).
  std::vector<int> furthest(workers), by(workers), second(workers);
  for (size_t t = 0; t < tasks; ++t) {
    Task &task = persistent.tasks[t];
    std::fill(furthest.begin(), furthest.end(), -1);
    std::fill(second.begin(), second.end(), -1);
    auto merge = [&](int predecessor) {
      const int *from = &done[size_t(predecessor) * workers];
      for (size_t v = 0; v < workers; ++v) {
        if (from[v] > furthest[v]) second[v] = furthest[v], furthest[v] = from[v], by[v] = predecessor;
        else second[v] = std::max(second[v], from[v]);
      }
    };
    if (before[t] >= 0) merge(before[t]);
    for (int wait : task.waits) merge(wait);
    std::vector<int> kept;
    for (int wait : task.waits) {
      const size_t v = size_t(workerOf[size_t(wait)]);
      if ((by[v] == wait ? second[v] : furthest[v]) < position[size_t(wait)]) kept.push_back(wait);
    }
    task.waits = std::move(kept);
    std::copy(furthest.begin(), furthest.end(), done.begin() + int64_t(t * workers));
    done[t * workers + size_t(workerOf[t])] = position[t];
  }
}

std::string formPersistentKernel(Program &program, const std::vector<TaskPlan> &plans, const Machine &machine) {
  const std::string path = taskPath(machine);
  if (plans.size() != program.kernels.size()) return "the kernels and their task plans differ in number";
  int threads = 0;
  int64_t shared = 0;
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    const Kernel &kernel = program.kernels[k];
    if (plans[k].blocks < 1) return fmt::format("kernel '{}' has no persistent form", kernel.name);
    const KernelLaunch *launch = findLaunch(kernel, "cuda", machine.wgmma ? "sm_90a" : "");
    if (!launch || launch->gridBlocks != plans[k].blocks)
      return fmt::format("kernel '{}': its tasks are not its blocks on {}", kernel.name, path);
    threads = std::max(threads, plans[k].threads);
    shared = std::max(shared, plans[k].sharedBytes);
  }
  if (shared + kStaticSharedBytes > machine.sharedBytesPerBlock)
    return fmt::format("its parts need {} KiB of shared memory a block, over the {} KiB a block has", (shared + 1023) >> 10,
                       (machine.sharedBytesPerBlock - kStaticSharedBytes) >> 10);
  const WeightRing ring = planWeightRing(program, plans, machine, shared, threads);
  if (ring.slots > 0) threads += 32;  // the producer

  Kernel persistent;
  persistent.taskPath = path;
  persistent.parts = program.kernels;
  for (size_t k = 0; k < plans.size(); ++k)
    for (int64_t b = 0; b < plans[k].blocks; ++b) persistent.tasks.push_back({int(k), b, {}, {}, 0});
  deriveWaits(program, plans, persistent);
  assignWorkers(persistent, machine.multiprocessors);
  dropImpliedWaits(persistent);

  // The parts' workspaces and counters side by side (they run at once), then the kernel's
  // own counters (persistentSyncLayout: a done word a task, the control words, a counter a
  // part).
  int64_t workspace = 0, sync = 0;
  for (const Kernel &part : persistent.parts) {
    persistent.partWorkspaceOffsets.push_back(workspace);
    persistent.partSyncOffsets.push_back(sync);
    workspace += (part.workspaceBytes + 255) / 256 * 256;
    sync += part.syncWords;
  }
  persistent.workspaceBytes = workspace;
  persistent.syncWords = persistentSyncLayout(persistent).words;

  // The kernel: every part's buffers and ops, one launch of a block a worker.
  std::set<int> inputs, outputs;
  for (const Kernel &part : persistent.parts) {
    for (int id : part.inputs)
      if (inputs.insert(id).second) persistent.inputs.push_back(id);
    for (int id : part.outputs)
      if (outputs.insert(id).second) persistent.outputs.push_back(id);
    persistent.ops.insert(persistent.ops.end(), part.ops.begin(), part.ops.end());
    for (const OpOrigin &origin : part.origins)
      if (std::none_of(persistent.origins.begin(), persistent.origins.end(),
                       [&](const OpOrigin &o) { return o.op == origin.op && o.role == origin.role; }))
        persistent.origins.push_back(origin);
    persistent.flops += part.flops;
    persistent.minBytes += part.minBytes;
  }
  persistent.name = persistent.entry = fmt::format("tl_persistent_{}_{}_{}x{}", identifier(program.model),
                                                   dtypeName(program.dtype), program.batch, program.seqLen);
  persistent.launch[path] = {machine.multiprocessors, threads, ring.end(shared)};
  persistent.source = kKernelSignaturePrefix + kernelSignature(program, persistent) + "\n" +
                      persistentSource(persistent.entry, persistent, threads, machine.workersPerSM, ring, program);
  program.kernels = {std::move(persistent)};
  program.workspaceBytes = program.kernels[0].workspaceBytes;
  return "";
}

namespace {

// Task numbers as a reader takes them in: runs of three or more as ranges ("t32-t47").
std::string taskList(const std::vector<int> &tasks) {
  std::vector<std::string> items;
  for (size_t i = 0; i < tasks.size();) {
    size_t end = i + 1;  // past the run of consecutive tasks from i
    while (end < tasks.size() && tasks[end] == tasks[end - 1] + 1) ++end;
    if (end - i < 3) end = i + 1;  // a pair is two items
    items.push_back(end > i + 1 ? fmt::format("t{}-t{}", tasks[i], tasks[end - 1]) : fmt::format("t{}", tasks[i]));
    i = end;
  }
  return fmt::format("{}", fmt::join(items, ","));
}

} // namespace

std::string describeSchedule(const Program &program, int layer) {
  std::string out;
  for (const Kernel &kernel : program.kernels) {
    if (kernel.parts.empty()) continue;
    double busiest = 0;
    for (const std::vector<int> &tasks : kernel.workers) {
      double total = 0;
      for (int t : tasks) total += kernel.tasks[size_t(t)].cost;
      busiest = std::max(busiest, total);
    }
    out += fmt::format("{}: {} parts, {} tasks on {} workers ({}); the estimate: {:.1f} µs on the busiest worker\n",
                       kernel.name, kernel.parts.size(), kernel.tasks.size(), kernel.workers.size(), kernel.taskPath,
                       busiest);
    out += "parts (kernel: blocks a task each):\n";
    for (size_t p = 0; p < kernel.parts.size(); ++p) {
      const Kernel &part = kernel.parts[p];
      if (layer >= 0 && part.layer != layer) continue;
      out += fmt::format("  p{:<3} {} (block {}){}\n", p, part.name, part.layer,
                         part.layer < 0 ? " outside the blocks" : "");
    }
    out += "workers (task = part.block ~estimated µs, then the tasks it waits for):\n";
    for (size_t w = 0; w < kernel.workers.size(); ++w) {
      std::string line;
      for (int t : kernel.workers[w]) {
        const Task &task = kernel.tasks[size_t(t)];
        if (layer >= 0 && kernel.parts[size_t(task.part)].layer != layer) continue;
        line += fmt::format(" t{}=p{}.{}~{:.1f}", t, task.part, task.block, task.cost);
        if (!task.waits.empty()) line += "<-" + taskList(task.waits);
      }
      if (!line.empty()) out += fmt::format("  w{:<3}{}\n", w, line);
    }
  }
  return out;
}

} // namespace tlc::codegen
