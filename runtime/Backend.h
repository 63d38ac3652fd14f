// The public Backend (include/tlc/Backend.h), and the runtime's own ways to make one.
#pragma once

#include <tlc/Backend.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace tlc {

class Communicator;  // runtime/Distributed.h

// A backend of one rank of a data-parallel run: its tl.all_reduce ops average over
// `ranks` (Gloo on the CPU; NCCL or RCCL on a GPU). Null `ranks`: one process, where an
// all_reduce is the identity.
std::unique_ptr<Backend> createCpuBackend(int threads, const PersistentSchedule &schedule,
                                          std::shared_ptr<Communicator> ranks);
// `overlapCollectives` (GPU): each all-reduce on a stream of its own (GpuOptions).
std::unique_ptr<Backend> createBackend(const BackendOptions &options, std::shared_ptr<Communicator> ranks,
                                       bool overlapCollectives = true);

// `count` seeded ids in [0, vocab): randomTokenIds(program, seed) is the first batch x seq
// of them, so a longer draw (every rank's batch) begins with the same ids.
std::vector<int32_t> randomTokenIds(size_t count, int64_t vocab, uint64_t seed);

} // namespace tlc
