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
// an integer sum and the same on every run. The draw comes from a per-sequence splitmix64
// stream, advanced once a sampled token, and walks the kept tokens in id order. The
// chosen id is also the decode's next input, and `advance` moves the sequence's position
// on by one. No prelude: NVRTC and hipRTC compile it as it is. Launch with a power-of-two
// block of TL_SAMPLE_MAX_THREADS threads.
//
//   v1  selections walk the logits' order as a radix select (four passes of 8 bits of an
//       order-preserving key, each thread adding runs of one digit to the bins), never
//       sorting; about 14 passes over the row, each thread one 2-byte load at a time,
//       and thread 0 walking the 256 bins of every radix pass alone.
//   v2  the passes read the row 16 bytes a load where it is aligned; a radix pass sums
//       each thread's tokens by digit in register slots, into four copies of the bins
//       (v1 added a run of tokens at a time to few bins, and the block waited on those
//       atomics); 32 threads walk the bins; the argmax is a maximum of words of
//       key and id; and with top-k of at most TL_SAMPLE_CANDIDATES the tokens at or above
//       the k-th largest of the threads' largest keys (from the argmax's pass) are
//       gathered and sorted (key descending, id ascending), so top-k, top-p and the draw
//       work on those few tokens instead of the row. v1's passes remain for the rest
//       (no top-k or a large one, more tokens at the threshold than fit).

struct tl_sampling_settings {
  float temperature;  // 0: greedy
  float topP;         // in (0, 1]
  int topK;           // 0: all
  int radixOnly;      // 1: v1's radix passes even where v2's top-k path applies (tests)
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
  int *paths;                   // [batch] or null: 1 where v2's top-k path chose, 0 elsewhere (tests)
};

#define TL_SAMPLE_MAX_THREADS 1024
#define TL_SAMPLE_CANDIDATES TL_SAMPLE_MAX_THREADS  // the most tokens v2 gathers for a top-k: one a thread
#define TL_SAMPLE_COPIES 4         // copies of the radix bins, a warp adding to copy warp % 4

// Shared memory every part uses in turn (one copy, not one an instantiation): the
// scans' and the argmax's words, and the radix passes' bins.
__shared__ unsigned long long tl_sample_scratch[2][TL_SAMPLE_MAX_THREADS];
__shared__ unsigned long long tl_sample_bins[TL_SAMPLE_COPIES][256];

__device__ __forceinline__ float tl_sample_logit(const tl_sample_args &a, long long row, int i) {
  if (a.bf16) {
    const unsigned bits = (unsigned)((const unsigned short *)a.logits)[row * a.vocab + i] << 16;
    return __uint_as_float(bits);
  }
  return ((const float *)a.logits)[row * a.vocab + i];
}

// f(i, x) for each token i of the row that this thread takes: 16 bytes a load where the
// row is aligned (8 bf16 or 4 floats, consecutive ids), else one token at a time.
template <class F> __device__ __forceinline__ void tl_sample_each(const tl_sample_args &a, long long row, F f) {
  const int t = threadIdx.x, n = blockDim.x;
  const unsigned char *base = (const unsigned char *)a.logits + row * a.vocab * (a.bf16 ? 2 : 4);
  const int per = a.bf16 ? 8 : 4, chunks = ((unsigned long long)base % 16 == 0) ? a.vocab / per : 0;
  for (int c = t; c < chunks; c += n) {
    const uint4 v = ((const uint4 *)base)[c];
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
    if (a.bf16) {
#pragma unroll
      for (int e = 0; e < 8; ++e) f(c * 8 + e, __uint_as_float(e % 2 ? w[e / 2] & 0xffff0000u : w[e / 2] << 16));
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) f(c * 4 + e, __uint_as_float(w[e]));
    }
  }
  for (int i = chunks * per + t; i < a.vocab; i += n) f(i, tl_sample_logit(a, row, i));
}

// An order-preserving key: a larger float, a larger key, equal floats one key; NaN the
// smallest.
__device__ __forceinline__ unsigned tl_sample_key(float x) {
  if (x != x) return 0u;
  const unsigned u = __float_as_uint(x == 0.0f ? 0.0f : x);  // -0 ties with +0, as in a comparison
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The logit of a key (NaN's key gives a NaN).
__device__ __forceinline__ float tl_sample_value(unsigned key) {
  return __uint_as_float(key & 0x80000000u ? key & 0x7fffffffu : ~key);
}

// What top-p keeps of a total weight: the weight the kept tokens must reach, in [1, total].
__device__ __forceinline__ unsigned long long tl_sample_top_p_want(float topP, unsigned long long total) {
  const unsigned long long want = (unsigned long long)ceil((double)topP * (double)total);
  return want < 1ull ? 1ull : want > total ? total : want;
}

// The exclusive prefix sum of each thread's value in thread order, and the total.
__device__ unsigned long long tl_sample_scan(unsigned long long value, unsigned long long *total) {
  unsigned long long (*buffer)[TL_SAMPLE_MAX_THREADS] = tl_sample_scratch;
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
  __shared__ unsigned chosenDigit;
  __shared__ unsigned long long chosenRest, laneSums[32];
  __shared__ int firstLane;
  unsigned long long (*copies)[256] = tl_sample_bins, *bins = tl_sample_bins[0];
  unsigned long long *mineCopy = copies[threadIdx.x / 32 % TL_SAMPLE_COPIES];
  unsigned prefix = 0u, mask = 0u;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < TL_SAMPLE_COPIES * 256; i += blockDim.x) copies[i / 256][i % 256] = 0ull;
    __syncthreads();
    // A pass's tokens fall in few digits (the first pass's in a handful: logits of one
    // sign and magnitude share their top bits), so each thread sums its tokens by digit in
    // four register slots and adds a slot to the bins only when it needs the slot for
    // another digit, into one of four copies of the bins: adding every token, or every
    // run of one digit, serialized the block on a few bins' atomics.
    unsigned slotDigit[4] = {0u, 0u, 0u, 0u};
    unsigned long long slotSum[4] = {0ull, 0ull, 0ull, 0ull};
    int victim = 0;
    tl_sample_each(a, row, [&](int i, float x) {
      const unsigned key = tl_sample_key(x);
      if ((key & mask) != prefix || !kept(i, key)) return;
      const unsigned digit = (key >> shift) & 255u;
      const unsigned long long w = weight(x);
      bool added = false;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (!added && slotSum[j] && slotDigit[j] == digit) slotSum[j] += w, added = true;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (!added && !slotSum[j]) slotDigit[j] = digit, slotSum[j] = w, added = true;
      if (!added) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (j == victim) {
            atomicAdd(&mineCopy[slotDigit[j]], slotSum[j]);
            slotDigit[j] = digit, slotSum[j] = w;
          }
        victim = (victim + 1) % 4;
      }
    });
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (slotSum[j]) atomicAdd(&mineCopy[slotDigit[j]], slotSum[j]);
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
      for (int c = 1; c < TL_SAMPLE_COPIES; ++c) bins[i] += copies[c][i];
    __syncthreads();
    // The first digit from the top at which the bins reach `want` (digit 0 if none does):
    // thread l < 32 takes digits 255 - 8l down to 248 - 8l (no warp intrinsics: AMD's
    // wavefronts are 64 wide).
    const int lane = threadIdx.x;
    unsigned long long mine[8], sum = 0ull, rest = 0ull;
    int found = -1;
    if (lane < 32) {
#pragma unroll
      for (int j = 0; j < 8; ++j) sum += mine[j] = bins[255 - 8 * lane - j];
      laneSums[lane] = sum;
    }
    if (lane == 0) firstLane = 32;
    __syncthreads();
    if (lane < 32) {
      unsigned long long above = 0ull;
      for (int l = 0; l < lane; ++l) above += laneSums[l];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int digit = 255 - 8 * lane - j;
        if (found < 0 && (above + mine[j] >= want || digit == 0)) found = digit, rest = want - above;
        above += mine[j];
      }
      if (found >= 0) atomicMin(&firstLane, lane);
    }
    __syncthreads();
    if (lane == firstLane) {
      chosenDigit = (unsigned)found;
      chosenRest = rest;
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

// Every token, of weight one: what a top-k counts (one type, so one radix's shared memory).
struct tl_sample_all {
  __device__ bool operator()(int, unsigned) const { return true; }
};
struct tl_sample_one {
  __device__ unsigned long long operator()(float) const { return 1ull; }
};

// A point in [0, total) from the sequence's next random word z.
__device__ __forceinline__ unsigned long long tl_sample_point(unsigned long long z, unsigned long long total) {
  return (unsigned long long)((double)(z >> 11) * 0x1.0p-53 * (double)total);
}

// v1's sampled choice (any top-k, top-p or none): radix cuts and passes over the row.
template <class Weight>
__device__ void tl_sample_by_radix(const tl_sample_args &a, long long row, const tl_sampling_settings &settings,
                                   Weight weight, unsigned long long z, int *result) {
  const int t = threadIdx.x;
  const tl_sample_one one;
  const tl_sample_all all;
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
  tl_sample_each(a, row, [&](int i, float x) {
    if (keptK(i, tl_sample_key(x))) mine += weight(x);
  });
  tl_sample_scan(mine, &total);
  unsigned pKey = 0u;
  int pBound = a.vocab - 1;
  const bool cutP = settings.topP < 1.0f;
  if (cutP) {
    const tl_sample_cut cut = tl_sample_radix(a, row, tl_sample_top_p_want(settings.topP, total), keptK, weight);
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
  const unsigned long long point = tl_sample_point(z, total);
  if (total > 0ull && before <= point && point < before + mine) {
    for (int i = begin; i < end; ++i) {
      const float x = tl_sample_logit(a, row, i);
      if (!kept(i, tl_sample_key(x))) continue;
      before += weight(x);
      if (point < before) {
        *result = i;
        break;
      }
    }
  }
  __syncthreads();
}

// Sorts n words (a power of two) of shared memory ascending: a bitonic network.
__device__ void tl_sample_sort(unsigned long long *words, int n) {
  for (int size = 2; size <= n; size *= 2)
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const int j = i ^ stride;
        if (j > i) {
          const unsigned long long x = words[i], y = words[j];
          if ((x > y) == ((i & size) == 0)) words[i] = y, words[j] = x;
        }
      }
      __syncthreads();
    }
}

__device__ __forceinline__ int tl_sample_power_of_two(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// v2's choice under a top-k of at most TL_SAMPLE_CANDIDATES (the block's threads):
// `threshold` is the k-th largest of the threads' largest keys (maxKey, each thread's
// from the argmax's pass), so at least k tokens reach it and the top-k are among them.
// Those tokens are gathered and sorted by (key descending, id ascending), the first k are
// the top-k; top-p and the draw on those, a token a thread. The same tokens and integer
// sums as v1, so the same choice. False (nothing chosen) where more tokens reach the
// threshold than fit.
template <class Weight>
__device__ bool tl_sample_from_top_k(const tl_sample_args &a, long long row, const tl_sampling_settings &settings,
                                     Weight weight, unsigned maxKey, unsigned long long z, int *result) {
  __shared__ unsigned long long words[TL_SAMPLE_CANDIDATES], weights[TL_SAMPLE_CANDIDATES];
  __shared__ int gathered, last;
  const int t = threadIdx.x, k = settings.topK;
  words[t] = ~maxKey;  // ascending: the largest key first
  if (t == 0) gathered = 0;
  __syncthreads();
  tl_sample_sort(words, blockDim.x);
  const unsigned threshold = ~(unsigned)words[k - 1];
  __syncthreads();
  tl_sample_each(a, row, [&](int i, float x) {
    const unsigned key = tl_sample_key(x);
    if (key < threshold) return;
    const int slot = atomicAdd(&gathered, 1);
    if (slot < TL_SAMPLE_CANDIDATES) words[slot] = ((unsigned long long)~key << 32) | (unsigned)i;
  });
  __syncthreads();
  const int count = gathered;
  if (count > TL_SAMPLE_CANDIDATES) return false;
  const int n = tl_sample_power_of_two(count);
  for (int i = count + t; i < n; i += blockDim.x) words[i] = ~0ull;
  if (t == 0) last = k - 1;
  __syncthreads();
  tl_sample_sort(words, n);

  // The top k in order, a token a thread; where top-p cuts, the first that reaches it.
  const bool top = t < k;
  const int id = top ? (int)(words[t] & 0xffffffffu) : 0;
  const unsigned long long w = top ? weight(tl_sample_logit(a, row, id)) : 0ull;
  unsigned long long total;
  const unsigned long long before = tl_sample_scan(w, &total);
  if (settings.topP < 1.0f) {
    const unsigned long long want = tl_sample_top_p_want(settings.topP, total);
    if (top && before < want && before + w >= want) last = t;
  }
  if (top) weights[t] = w;
  __syncthreads();
  // The kept tokens in id order, each with its place in the order above.
  const int keep = last + 1, m = tl_sample_power_of_two(keep);
  if (t < m) words[t] = t < keep ? ((unsigned long long)id << 32) | (unsigned)t : ~0ull;
  __syncthreads();
  tl_sample_sort(words, m);
  const bool kept = t < keep;
  const unsigned long long wk = kept ? weights[words[t] & 0xffffffffu] : 0ull;
  unsigned long long keptTotal;
  const unsigned long long from = tl_sample_scan(wk, &keptTotal);
  const unsigned long long point = tl_sample_point(z, keptTotal);
  if (keptTotal > 0ull && kept && from <= point && point < from + wk) *result = (int)(words[t] >> 32);
  __syncthreads();
  return true;
}

extern "C" __global__ void __launch_bounds__(TL_SAMPLE_MAX_THREADS) tl_sample(tl_sample_args a) {
  __shared__ int result;
  __shared__ float maximumLogit;
  const int b = blockIdx.x, t = threadIdx.x;
  const long long row = a.rows[b];
  const tl_sampling_settings settings = *a.settings;

  // The largest logit, the lowest id on a tie (NaN never wins): the largest word of key
  // and inverted id.
  unsigned long long best = 0ull;
  tl_sample_each(a, row, [&](int i, float x) {
    const unsigned long long word = ((unsigned long long)tl_sample_key(x) << 32) | (unsigned)~i;
    best = word > best ? word : best;
  });
  unsigned long long *words = tl_sample_scratch[0];
  words[t] = best;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half && words[t + half] > words[t]) words[t] = words[t + half];
    __syncthreads();
  }
  if (t == 0) {
    const unsigned key = (unsigned)(words[0] >> 32);
    result = key == 0u ? 0 : (int)~(unsigned)words[0];  // every logit NaN: token 0
    maximumLogit = key == 0u ? -__uint_as_float(0x7f800000u) : tl_sample_value(key);
  }
  __syncthreads();
  const float maximum = maximumLogit;

  if (settings.temperature > 0.0f) {
    const float inverse = 1.0f / settings.temperature;
    auto weight = [&](float x) -> unsigned long long {
      const float w = expf((x - maximum) * inverse);  // in [0, 1]
      return x == x ? (unsigned long long)(w * 1099511627776.0f) : 0ull;  // 2^40
    };
    const unsigned long long state = a.random[b] + 0x9e3779b97f4a7c15ull;
    unsigned long long z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const bool fewK = !settings.radixOnly && settings.topK > 0 && settings.topK < a.vocab &&
                      settings.topK <= TL_SAMPLE_CANDIDATES && (int)blockDim.x == TL_SAMPLE_CANDIDATES;
    const bool fromTopK = fewK && tl_sample_from_top_k(a, row, settings, weight, (unsigned)(best >> 32), z, &result);
    if (!fromTopK) tl_sample_by_radix(a, row, settings, weight, z, &result);
    if (t == 0 && a.paths) a.paths[b] = fromTopK;
    if (t == 0) a.random[b] = state;
  }
  if (t == 0) {
    a.chosen[b] = result;
    a.next[b] = result;
    if (a.advance) a.positions[b] += 1;
  }
}
