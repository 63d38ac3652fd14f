// O3: the forward as one persistent kernel. The kernels a lowered Program launches one
// after another become the parts of one kernel; each block of a part is a task (its
// reads and writes from the kernel-level representation, Tasks.h); a task waits for the
// earlier tasks of other parts whose writes overlap what it reads or writes (read after
// write, and, since the memory planner reuses the arena, write after read and write after
// write). A cost model assigns the tasks, in their order, to one worker a multiprocessor:
// each to the worker that can start it first, so the critical path stays busy. Workers run
// their tasks in order and every wait is for an earlier task, so no schedule deadlocks;
// a wait that another implies is then dropped.
#pragma once

#include "compiler/codegen/Schedule.h"
#include "compiler/codegen/Tasks.h"
#include "runtime/Program.h"

#include <string>
#include <vector>

namespace tlc::codegen {

// The arena bytes a Program value's elements [begin, end) occupy; none for weights (never
// written while a Program runs) and locals. `end` may be kWholeValue.
std::vector<std::pair<int64_t, int64_t>> arenaBytes(const Program &program, int value, int64_t begin, int64_t end);

// Replaces program.kernels by one persistent kernel of those kernels (plans[k] is kernel
// k's blocks on the machine's path) and returns ""; or returns why it cannot (a kernel
// without a persistent form, parts needing more shared memory than a block has), leaving
// the Program as it was.
std::string formPersistentKernel(Program &program, const std::vector<TaskPlan> &plans, const Machine &machine);

// Drops each wait of a task that another of its predecessors implies: where task t waits
// for x, and its worker's task before it or another task it waits for could start only
// after x was done (through its own waits or its worker's order, transitively), that
// one's done word says x's too, and t need not poll x's. Every wait is for an earlier
// task, each worker's list ascends and every task is on one worker (assignWorkers'
// table). (A decode step's attention task need not wait for the previous layer's down
// projection: the QKV tasks it waits for did.)
void dropImpliedWaits(Kernel &persistent);

// What tlc --emit=schedule prints: each worker's tasks (part, block, estimated time) and
// every task's waits, readably; `layer` >= 0 shows the tasks of that transformer block only.
std::string describeSchedule(const Program &program, int layer = -1);

} // namespace tlc::codegen
