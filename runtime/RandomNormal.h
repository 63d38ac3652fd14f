// Seeded normal samples, fast enough to initialize a billion weights in seconds: a
// ziggurat sampler over counter-seeded streams, so the result does not depend on how
// many threads fill it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tlc {

class ThreadPool;

// Fills data[0, count) with normal(0, stddev) samples. Element i depends only on
// (streamSeed, i), whatever `pool` is (null: the calling thread alone).
void fillNormal(float *data, size_t count, double stddev, uint64_t streamSeed, ThreadPool *pool);

} // namespace tlc
