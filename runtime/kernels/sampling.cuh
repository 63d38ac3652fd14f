// sampling.cuh: the runtime's sampler for generation on the device (Generator on a GPU):
// each sequence's next token chosen from its row of logits, so only the chosen ids
// cross to the host. The same choice as tlc::chooseToken (include/tlc/Generate.h):
//
//   greedy (temperature 0)  the largest logit, the lowest id on a tie;
//   sampled                  weights exp((logit - max) / temperature), cut to the top-k
//                            tokens, then to the fewest most likely whose weights reach
//                            top-p of what is left (ties ordered by id, lower first), and a
//                            draw among those in proportion to their weights.
//
// One block a sequence. Weights are fixed point (2^40 for the largest), so every sum is
// an integer sum and the same on every run; selections walk the logits' order as a radix
// select (four passes of 8 bits of an order-preserving key), never sorting. The draw comes
// from a per-sequence splitmix64 stream, advanced once a sampled token. The chosen id is
// also the decode's next input, and `advance` moves the sequence's position on by one.
// No prelude: NVRTC and hipRTC compile it as it is. Launch with a power-of-two block of
// at most 1024 threads.

struct tl_sampling_settings {
  float temperature;  // 0: greedy
  float topP;         // in (0, 1]
  int topK;           // 0: all
  int unused;
};

struct tl_sample_args {
  const void *logits;           // [rows, vocab], fp32 or bf16
  const int *rows;              // sequence b's row of logits
  const tl_sampling_settings *settings;
  unsigned long long *random;   // [batch] splitmix64 states
  int *chosen;                  // [batch] the chosen ids (what the host reads)
  int *next;                    // [batch] the decode's input ids
  int *positions;               // [batch] the decode's positions
  int vocab, bf16, advance;
};

#define TL_SAMPLE_MAX_THREADS 1024

__device__ __forceinline__ float tl_sample_logit(const tl_sample_args &a, long long row, int i) {
  if (a.bf16) {
    const unsigned bits = (unsigned)((const unsigned short *)a.logits)[row * a.vocab + i] << 16;
    return __uint_as_float(bits);
  }
  return ((const float *)a.logits)[row * a.vocab + i];
}

// An order-preserving key: a larger float, a larger key; NaN the smallest.
__device__ __forceinline__ unsigned tl_sample_key(float x) {
  if (x != x) return 0u;
  const unsigned u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The exclusive prefix sum of each thread's value in thread order, and the total.
__device__ unsigned long long tl_sample_scan(unsigned long long value, unsigned long long *total) {
  __shared__ unsigned long long buffer[2][TL_SAMPLE_MAX_THREADS];
  const int t = threadIdx.x, n = blockDim.x;
  int from = 0;
  buffer[0][t] = value;
  __syncthreads();
  for (int step = 1; step < n; step *= 2) {
    buffer[1 - from][t] = buffer[from][t] + (t >= step ? buffer[from][t - step] : 0ull);
    from = 1 - from;
    __syncthreads();
  }
  const unsigned long long inclusive = buffer[from][t];
  *total = buffer[from][n - 1];
  __syncthreads();
  return inclusive - value;
}

// Selection by the order (key descending, id ascending) of the tokens `kept` allows: the
// key of the boundary token, what must still be taken among the tokens of that key,
// found by four 8-bit passes that count (weighted: sum the weights of) each digit.
struct tl_sample_cut {
  unsigned key;
  unsigned long long rest;
};

template <class Kept, class Weight>
__device__ tl_sample_cut tl_sample_radix(const tl_sample_args &a, long long row, unsigned long long want, Kept kept,
                                         Weight weight) {
  __shared__ unsigned long long bins[256];
  __shared__ unsigned chosenDigit;
  __shared__ unsigned long long chosenRest;
  unsigned prefix = 0u, mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) bins[i] = 0ull;
    __syncthreads();
    // A thread's tokens mostly share the digit (logits of one magnitude share their top
    // bits), so each thread sums runs of one digit and adds a run at a time: adding every
    // token's weight to one of a few bins serialized the block on those atomics.
    unsigned runDigit = 0u;
    unsigned long long runSum = 0ull;
    for (int i = threadIdx.x; i < a.vocab; i += blockDim.x) {
      const float x = tl_sample_logit(a, row, i);
      const unsigned key = tl_sample_key(x);
      if ((key & mask) != prefix || !kept(i, key)) continue;
      const unsigned digit = (key >> shift) & 255u;
      if (digit != runDigit && runSum) {
        atomicAdd(&bins[runDigit], runSum);
        runSum = 0ull;
      }
      runDigit = digit;
      runSum += weight(x);
    }
    if (runSum) atomicAdd(&bins[runDigit], runSum);
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long above = 0ull;
      int digit = 255;
      while (digit > 0 && above + bins[digit] < want) above += bins[digit--];
      chosenDigit = (unsigned)digit;
      chosenRest = want - above;
    }
    __syncthreads();
    prefix |= chosenDigit << shift;
    mask |= 255u << shift;
    want = chosenRest;
    __syncthreads();
  }
  return {prefix, want};
}

// The id at which the tokens of key `key` that `kept` allows, in id order, first reach
// `want` of `weight` (the rest of a cut); each thread takes a contiguous range of ids.
template <class Kept, class Weight>
__device__ int tl_sample_tie_bound(const tl_sample_args &a, long long row, unsigned key, unsigned long long want,
                                   Kept kept, Weight weight) {
  __shared__ int bound;
  const int chunk = (a.vocab + blockDim.x - 1) / blockDim.x, begin = threadIdx.x * chunk;
  const int end = begin + chunk < a.vocab ? begin + chunk : a.vocab;
  unsigned long long mine = 0ull, total;
  for (int i = begin; i < end; ++i) {
    const float x = tl_sample_logit(a, row, i);
    if (tl_sample_key(x) == key && kept(i, tl_sample_key(x))) mine += weight(x);
  }
  if (threadIdx.x == 0) bound = a.vocab - 1;
  unsigned long long before = tl_sample_scan(mine, &total);
  if (before < want && before + mine >= want) {
    for (int i = begin; i < end; ++i) {
      const float x = tl_sample_logit(a, row, i);
      if (tl_sample_key(x) == key && kept(i, tl_sample_key(x))) {
        before += weight(x);
        if (before >= want) {
          bound = i;
          break;
        }
      }
    }
  }
  __syncthreads();
  return bound;
}

extern "C" __global__ void __launch_bounds__(TL_SAMPLE_MAX_THREADS) tl_sample(tl_sample_args a) {
  __shared__ float bestValue[TL_SAMPLE_MAX_THREADS];
  __shared__ int bestIndex[TL_SAMPLE_MAX_THREADS];
  __shared__ int result;
  const int b = blockIdx.x, t = threadIdx.x;
  const long long row = a.rows[b];
  const tl_sampling_settings settings = *a.settings;

  // The largest logit, the lowest id on a tie (NaN never wins).
  float best = -__uint_as_float(0x7f800000u);
  int index = -1;
  for (int i = t; i < a.vocab; i += blockDim.x) {
    const float x = tl_sample_logit(a, row, i);
    if (x == x && (index < 0 || x > best)) {
      best = x;
      index = i;
    }
  }
  bestValue[t] = best;
  bestIndex[t] = index;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) {
      const float other = bestValue[t + half];
      const int otherIndex = bestIndex[t + half];
      if (otherIndex >= 0 && (bestIndex[t] < 0 || other > bestValue[t] ||
                              (other == bestValue[t] && otherIndex < bestIndex[t]))) {
        bestValue[t] = other;
        bestIndex[t] = otherIndex;
      }
    }
    __syncthreads();
  }
  const float maximum = bestValue[0];
  if (t == 0) result = bestIndex[0] < 0 ? 0 : bestIndex[0];
  __syncthreads();

  if (settings.temperature > 0.0f) {
    const float inverse = 1.0f / settings.temperature;
    auto weight = [&](float x) -> unsigned long long {
      const float w = expf((x - maximum) * inverse);  // in [0, 1]
      return x == x ? (unsigned long long)(w * 1099511627776.0f) : 0ull;  // 2^40
    };
    auto one = [](float) -> unsigned long long { return 1ull; };
    auto all = [](int, unsigned) { return true; };
    // Top-k: the k-th token in order, and how many of its key are kept.
    unsigned topKey = 0u;
    int topBound = a.vocab - 1;
    const bool cutK = settings.topK > 0 && settings.topK < a.vocab;
    if (cutK) {
      const tl_sample_cut cut = tl_sample_radix(a, row, (unsigned long long)settings.topK, all, one);
      topKey = cut.key;
      topBound = tl_sample_tie_bound(a, row, cut.key, cut.rest, all, one);
    }
    auto keptK = [=](int i, unsigned key) { return !cutK || key > topKey || (key == topKey && i <= topBound); };
    // Top-p of the weights left.
    unsigned long long mine = 0ull, total;
    for (int i = t; i < a.vocab; i += blockDim.x) {
      const float x = tl_sample_logit(a, row, i);
      if (keptK(i, tl_sample_key(x))) mine += weight(x);
    }
    tl_sample_scan(mine, &total);
    unsigned pKey = 0u;
    int pBound = a.vocab - 1;
    const bool cutP = settings.topP < 1.0f;
    if (cutP) {
      unsigned long long want = (unsigned long long)ceil((double)settings.topP * (double)total);
      want = want < 1ull ? 1ull : want > total ? total : want;
      const tl_sample_cut cut = tl_sample_radix(a, row, want, keptK, weight);
      pKey = cut.key;
      pBound = tl_sample_tie_bound(a, row, cut.key, cut.rest, keptK, weight);
    }
    auto kept = [=](int i, unsigned key) {
      return keptK(i, key) && (!cutP || key > pKey || (key == pKey && i <= pBound));
    };
    // The draw: a point in [0, kept weight), found walking the ids in order.
    const int chunk = (a.vocab + blockDim.x - 1) / blockDim.x, begin = t * chunk;
    const int end = begin + chunk < a.vocab ? begin + chunk : a.vocab;
    mine = 0ull;
    for (int i = begin; i < end; ++i) {
      const float x = tl_sample_logit(a, row, i);
      if (kept(i, tl_sample_key(x))) mine += weight(x);
    }
    unsigned long long before = tl_sample_scan(mine, &total);
    unsigned long long state = a.random[b] + 0x9e3779b97f4a7c15ull;
    unsigned long long z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const unsigned long long point = (unsigned long long)((double)(z >> 11) * 0x1.0p-53 * (double)total);
    if (total > 0ull && before <= point && point < before + mine) {
      for (int i = begin; i < end; ++i) {
        const float x = tl_sample_logit(a, row, i);
        if (!kept(i, tl_sample_key(x))) continue;
        before += weight(x);
        if (point < before) {
          result = i;
          break;
        }
      }
    }
    __syncthreads();
    if (t == 0) a.random[b] = state;
  }
  if (t == 0) {
    a.chosen[b] = result;
    a.next[b] = result;
    if (a.advance) a.positions[b] += 1;
  }
}
