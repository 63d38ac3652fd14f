// Liveness-based arena placement: greedy, largest value first, lowest fitting offset.
#include "runtime/MemoryPlanner.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <queue>

#include "runtime/Checked.h"
#include "runtime/Error.h"

namespace tlc {
namespace {

bool isPlanned(const Value &value) { return livesInArena(value.storage); }

struct Lifetime {
  int first = std::numeric_limits<int>::max(); // kernel index of the first use
  int last = -1;                               // kernel index of the last use
  bool used() const { return last >= 0; }
  void extend(int kernel) {
    first = std::min(first, kernel);
    last = std::max(last, kernel);
  }
  bool overlaps(const Lifetime &other) const { return first <= other.last && other.first <= last; }
};

// Lifetimes indexed by value id; only planned values' entries are meaningful.
std::vector<Lifetime> computeLifetimes(const Program &program) {
  std::vector<Lifetime> lifetimes(program.values.size());
  // Any use of a value or of a view of it keeps the owning bytes alive.
  auto touch = [&](int id, int kernel) {
    lifetimes[size_t(program.storageOf(id).id)].extend(kernel);
  };
  // Steps in order: each kernel, or each part of a persistent kernel (whose tasks wait for
  // every earlier part's tasks that read or write the bytes they write: a reuse of bytes
  // between its parts is as safe as between kernels).
  std::vector<const Kernel *> steps = computeKernels(program);
  for (size_t k = 0; k < steps.size(); ++k) {
    const Kernel &kernel = *steps[k];
    for (int id : kernel.inputs) touch(id, int(k));
    for (int id : kernel.outputs) touch(id, int(k));
    for (const OpRecord &op : kernel.ops) {
      for (int id : op.operands) touch(id, int(k));
      for (int id : op.results) touch(id, int(k));
    }
  }
  int lastKernel = std::max<int>(0, int(steps.size()) - 1);
  for (const Value &value : program.values) {
    if (!isPlanned(value)) continue;
    Lifetime &lifetime = lifetimes[size_t(value.id)];
    // Inputs are written by the caller before kernel 0 and stay for the whole run
    // (Program.h); outputs are read by the caller after the last kernel.
    if (value.storage == Storage::Input) {
      lifetime.extend(0);
      lifetime.extend(lastKernel);
    }
    if (value.storage == Storage::Output) lifetime.extend(lastKernel);
    // A value no kernel touches still gets its own bytes: live for the whole run.
    if (!lifetime.used()) {
      lifetime.extend(0);
      lifetime.extend(lastKernel);
    }
  }
  return lifetimes;
}

// Byte arithmetic of the plan, checked: a hostile Program must not wrap an offset.
int64_t planned(std::optional<int64_t> bytes) {
  if (!bytes) throw Error("memory planner: the arena would exceed 2^63 bytes");
  return *bytes;
}

int64_t alignUp(int64_t bytes, int64_t alignment) {
  return planned(checkedMul(planned(checkedAdd(bytes, alignment - 1)) / alignment, alignment));
}

} // namespace

int64_t planMemory(Program &program, int64_t alignment) {
  if (alignment < 1)
    throw Error(fmt::format("memory planner: alignment {} must be positive", alignment));
  std::vector<Lifetime> lifetimes = computeLifetimes(program);

  std::vector<int> order;
  for (const Value &value : program.values)
    if (isPlanned(value)) order.push_back(value.id);
  // Largest first; ties by id so the plan is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return program.values[size_t(a)].bytes() > program.values[size_t(b)].bytes();
  });

  struct Placement {
    int64_t begin, end;
    int id;
  };
  std::vector<Placement> placed;
  int64_t arenaBytes = 0;
  for (int id : order) {
    Value &value = program.values[size_t(id)];
    int64_t size = value.bytes();
    // Byte ranges of placed values alive at the same time, in address order.
    std::vector<Placement> conflicts;
    for (const Placement &other : placed)
      if (lifetimes[size_t(id)].overlaps(lifetimes[size_t(other.id)])) conflicts.push_back(other);
    std::sort(conflicts.begin(), conflicts.end(),
              [](const Placement &a, const Placement &b) { return a.begin < b.begin; });
    int64_t offset = 0;
    for (const Placement &conflict : conflicts) {
      if (planned(checkedAdd(offset, size)) <= conflict.begin) break;
      offset = std::max(offset, alignUp(conflict.end, alignment));
    }
    value.offset = offset;
    int64_t end = planned(checkedAdd(offset, size));
    placed.push_back({offset, end, id});
    arenaBytes = std::max(arenaBytes, end);
  }
  program.arenaBytes = alignUp(arenaBytes, alignment);

  // Views carry their base's offset, so program.json shows where their bytes are.
  for (Value &value : program.values)
    if (value.storage == Storage::View) {
      const Value &base = program.storageOf(value.id);
      value.offset = isPlanned(base) ? base.offset : -1;
    }
  return program.arenaBytes;
}

int64_t unplannedBytes(const Program &program) {
  int64_t total = 0;
  for (const Value &value : program.values)
    if (isPlanned(value)) total = planned(checkedAdd(total, value.bytes()));
  return total;
}

void checkPlacement(const Program &program) {
  std::vector<Lifetime> lifetimes = computeLifetimes(program);
  std::vector<int> order;
  for (const Value &value : program.values)
    if (isPlanned(value)) order.push_back(value.id);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return lifetimes[size_t(a)].first < lifetimes[size_t(b)].first;
  });
  // Sweep over time: the byte ranges of the values alive now, disjoint and keyed by
  // their first byte, so a new value can only collide with its two neighbours.
  struct Range {
    int64_t end;
    int id;
  };
  std::map<int64_t, Range> alive;
  std::priority_queue<std::pair<int, int64_t>, std::vector<std::pair<int, int64_t>>,
                      std::greater<>>
      expiry; // (last kernel, first byte) of the values in `alive`
  auto overlapError = [&](int a, int b) {
    const Value &x = program.values[size_t(a)], &y = program.values[size_t(b)];
    return Error(fmt::format("arena values {} ('{}', bytes {}..{}) and {} ('{}', bytes {}..{}) are "
                             "alive at the same time but share bytes",
                             x.id, x.name, x.offset, x.offset + x.bytes(), y.id, y.name, y.offset,
                             y.offset + y.bytes()));
  };
  for (int id : order) {
    const Lifetime &lifetime = lifetimes[size_t(id)];
    for (; !expiry.empty() && expiry.top().first < lifetime.first; expiry.pop())
      alive.erase(expiry.top().second);
    const Value &value = program.values[size_t(id)];
    int64_t begin = value.offset, end = planned(checkedAdd(begin, value.bytes()));
    auto next = alive.lower_bound(begin);
    if (next != alive.end() && next->first < end) throw overlapError(id, next->second.id);
    if (next != alive.begin() && std::prev(next)->second.end > begin)
      throw overlapError(id, std::prev(next)->second.id);
    alive.emplace(begin, Range{end, id});
    expiry.emplace(lifetime.last, begin);
  }
}

int64_t stateBytesOf(const Program &program) {
  int64_t bytes = 0;
  for (const Value &value : program.values)
    if (value.storage == Storage::State)
      bytes = checkedAdd(bytes, value.bytes()).value_or(std::numeric_limits<int64_t>::max());
  return bytes;
}

bool livesInArena(Storage storage) {
  return storage == Storage::Input || storage == Storage::Output || storage == Storage::Activation;
}

void planMemoryIfNeeded(Program &program) {
  for (const Value &value : program.values)
    if (livesInArena(value.storage) && value.offset < 0) {
      planMemory(program);
      return;
    }
}

} // namespace tlc
