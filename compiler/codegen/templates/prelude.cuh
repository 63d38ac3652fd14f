// prelude.cuh: what every generated kernel starts with. One source compiles with NVRTC
// (NVIDIA) and hipRTC (AMD); the emitter puts the per-vendor block (TL_WARP, shuffles,
// written from compiler/Targets.cpp's table) in front of this file.
//
// Storage: bf16 is its 16 bits (tl_bf16); arithmetic is fp32. Offsets are element
// offsets. Vector helpers move 8 elements (16 bytes of bf16) at a time.
#pragma once

typedef long long tl_i64;
struct tl_bf16 { unsigned short bits; };
struct alignas(16) tl_u32x4 { unsigned x, y, z, w; };
struct alignas(8) tl_u32x2 { unsigned x, y; };

#define TL_DEVICE __device__ __forceinline__

// ---- the block a kernel's body works on ---------------------------------------------
// Launched on its own, a kernel works on block blockIdx.x of a grid of gridDim.x blocks
// of blockDim.x threads. In the persistent kernel (TL_PERSISTENT: O3's megakernel) a
// worker runs the blocks of many kernels one after another as tasks: these say which
// block of which grid, with how many of the worker's threads (the first ones), and
// tl_sync() is the barrier of those threads only.
// Inputs a kernel only reads are __restrict__, so loads may take the read-only data path.
// Not in a persistent kernel: an input is written by an earlier task of the same launch,
// which that path would not see.
#if defined(TL_PERSISTENT)
#define TL_RESTRICT
#else
#define TL_RESTRICT __restrict__
#endif

#if defined(TL_PERSISTENT)
struct tl_task_frame {
  int block, grid, threads;
};
__shared__ tl_task_frame tl_task;
TL_DEVICE int tl_block_index() { return tl_task.block; }
TL_DEVICE int tl_grid_blocks() { return tl_task.grid; }
TL_DEVICE int tl_block_threads() { return tl_task.threads; }
#if defined(TL_NVIDIA)
TL_DEVICE void tl_sync() { asm volatile("bar.sync 3, %0;" ::"r"(tl_task.threads) : "memory"); }
#else
TL_DEVICE void tl_sync() { __syncthreads(); }  // AMD: a task takes the whole block
#endif
#else
TL_DEVICE int tl_block_index() { return blockIdx.x; }
TL_DEVICE int tl_grid_blocks() { return gridDim.x; }
TL_DEVICE int tl_block_threads() { return blockDim.x; }
TL_DEVICE void tl_sync() { __syncthreads(); }
#endif

// The global timer in nanoseconds (AMD: cycles, about a nanosecond each), and a trap that
// ends the kernel with an error.
TL_DEVICE unsigned long long tl_nanoseconds() {
#if defined(TL_NVIDIA)
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
#else
  return (unsigned long long)clock64();  // AMD: cycles, about a nanosecond each
#endif
}
TL_DEVICE void tl_trap() {
#if defined(TL_NVIDIA)
  __trap();
#else
  __builtin_trap();
#endif
}
#if defined(TL_PERSISTENT)
// A persistent kernel's wait that timed out, written into `report` (host-mapped; may be
// null) as {1, worker, task, what it waited for} before the caller traps. The first such
// wait claims it (`claim`, a device word: atomics on mapped host memory are not
// portable); a later one gives it a moment to land, so the host reads one wait's record.
TL_DEVICE void tl_report_timeout(unsigned *report, unsigned *claim, unsigned task, unsigned waited) {
  if (!report) return;
  if (atomicCAS(claim, 0u, 1u) == 0u) {
    report[1] = blockIdx.x;
    report[2] = task;
    report[3] = waited;
    __threadfence_system();
    *(volatile unsigned *)report = 1u;
    __threadfence_system();
    return;
  }
  const unsigned long long claimed = tl_nanoseconds();
  while (*(volatile unsigned *)report == 0u && tl_nanoseconds() - claimed < 1000000ull) {
  }
}
#endif
#if defined(TL_NVIDIA)
// A shared-memory pointer as the 32-bit address PTX's shared-memory instructions take.
TL_DEVICE unsigned tl_smem_addr(const void *p) {
  unsigned address;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(address) : "l"(p));
  return address;
}
#endif

// ---- the weight ring of a persistent kernel (NVIDIA sm_90+) ----------------------------
// Where the generator sets TL_RING_SLOTS, a worker's last warp is its producer: it copies
// the weights of the worker's matrix-vector tasks, in task order, into TL_RING_SLOTS slots
// of TL_RING_SLOT_BYTES (dynamic shared memory from TL_RING_OFFSET) with bulk copies, as
// far ahead of the tasks as the slots allow: weights depend on no task. A slot's `full`
// barrier completes when its bytes have landed; its `empty` barrier when the task's
// TL_RING_CONSUMER_WARPS warps have read it. The n-th unit a worker copies goes to slot
// n % TL_RING_SLOTS in phase n / TL_RING_SLOTS; tl_ring_taken counts the units its tasks
// have read.
#if defined(TL_PERSISTENT) && defined(TL_NVIDIA) && defined(TL_RING_SLOTS) && __CUDA_ARCH__ >= 900
#define TL_RING 1
__shared__ unsigned long long tl_ring_full[TL_RING_SLOTS], tl_ring_empty[TL_RING_SLOTS];
__shared__ unsigned tl_ring_taken;
__shared__ unsigned long long tl_ring_timeout;  // nanoseconds, the task waits' (set by the worker)
__shared__ unsigned *tl_ring_report, *tl_ring_claim;  // where a timed-out wait is reported (set by the worker)
// What a ring wait that timed out waited for, as its report says it (no task: the
// producer runs ahead of the task warps): a slot's weights, or a slot to copy them into.
#define TL_RING_WAITED_FILL 0x7fffffffu  // the task warps, for the producer
#define TL_RING_WAITED_FREE 0x7ffffffeu  // the producer, for the task warps
TL_DEVICE unsigned char *tl_ring_slot(unsigned unit) {
  extern __shared__ __align__(128) unsigned char tl_smem[];
  return tl_smem + TL_RING_OFFSET + (unit % TL_RING_SLOTS) * TL_RING_SLOT_BYTES;
}
TL_DEVICE void tl_barrier_init(unsigned long long *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(tl_smem_addr(bar)), "r"(count) : "memory");
}
TL_DEVICE void tl_barrier_arrive(unsigned long long *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(tl_smem_addr(bar)) : "memory");
}
TL_DEVICE void tl_barrier_arrive_expect(unsigned long long *bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(tl_smem_addr(bar)), "r"(bytes) : "memory");
}
// Waits until the phase of parity `parity` of `bar` has completed; after tl_ring_timeout
// nanoseconds of waiting, reports that it waited for `waited` (TL_RING_WAITED_*) and traps
// rather than hang.
TL_DEVICE void tl_barrier_wait(unsigned long long *bar, unsigned parity, unsigned waited) {
  unsigned long long start = 0;
  for (;;) {
    unsigned done;
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(tl_smem_addr(bar)), "r"(parity) : "memory");
    if (done) return;
    const unsigned long long now = tl_nanoseconds();
    if (start == 0) start = now;
    else if (now - start > tl_ring_timeout) {
      tl_report_timeout(tl_ring_report, tl_ring_claim, ~0u, waited);
      tl_trap();
    }
  }
}
// `bytes` (a multiple of 16) from global memory into shared memory, counted on `bar`.
TL_DEVICE void tl_bulk_copy(void *to, const void *from, unsigned bytes, unsigned long long *bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(tl_smem_addr(to)), "l"(from), "r"(bytes), "r"(tl_smem_addr(bar)) : "memory");
}
#endif

TL_DEVICE float tl_inf() { return __uint_as_float(0x7f800000u); }
TL_DEVICE float tl_nan() { return __uint_as_float(0x7fc00000u); }
TL_DEVICE float tl_exp(float x) { return expf(x); }

// T where C holds, else F (std::conditional: the JIT compilers see no standard headers).
template <bool C, class T, class F> struct tl_conditional {
  using type = T;
};
template <class T, class F> struct tl_conditional<false, T, F> {
  using type = F;
};

// ---- bf16 <-> fp32 ----------------------------------------------------------------
TL_DEVICE float tl_bf16_lo(unsigned pair) { return __uint_as_float(pair << 16); }
TL_DEVICE float tl_bf16_hi(unsigned pair) { return __uint_as_float(pair & 0xffff0000u); }
// Two floats to a bf16 pair (lo in the low half), rounding to nearest even; NaN stays NaN.
TL_DEVICE unsigned tl_pack_bf16(float lo, float hi) {
#if defined(TL_NVIDIA) && __CUDA_ARCH__ >= 800
  unsigned packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
#else
  unsigned out[2];
  float in[2] = {lo, hi};
  for (int i = 0; i < 2; ++i) {
    unsigned bits = __float_as_uint(in[i]);
    if ((bits & 0x7fffffffu) > 0x7f800000u) out[i] = (bits >> 16) | 0x40u;
    else out[i] = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  }
  return (out[0] & 0xffffu) | (out[1] << 16);
#endif
}

// ---- scalar and 8-wide loads and stores, by storage type ------------------------------
TL_DEVICE float tl_ld(const float *p, tl_i64 i) { return p[i]; }
TL_DEVICE float tl_ld(const tl_bf16 *p, tl_i64 i) { return __uint_as_float(((unsigned)p[i].bits) << 16); }
TL_DEVICE float tl_ld(const int *p, tl_i64 i) { return (float)p[i]; }
TL_DEVICE void tl_st(float *p, tl_i64 i, float v) { p[i] = v; }
TL_DEVICE void tl_st(tl_bf16 *p, tl_i64 i, float v) { p[i].bits = (unsigned short)(tl_pack_bf16(v, 0.0f) & 0xffffu); }

TL_DEVICE void tl_ld8(const tl_bf16 *p, tl_i64 i, float (&v)[8]) {
  const tl_u32x4 raw = *reinterpret_cast<const tl_u32x4 *>(p + i);
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = tl_bf16_lo(w[j]);
    v[2 * j + 1] = tl_bf16_hi(w[j]);
  }
}
TL_DEVICE void tl_ld8(const float *p, tl_i64 i, float (&v)[8]) {
  for (int j = 0; j < 8; j += 4) {
    const tl_u32x4 raw = *reinterpret_cast<const tl_u32x4 *>(p + i + j);
    v[j] = __uint_as_float(raw.x);
    v[j + 1] = __uint_as_float(raw.y);
    v[j + 2] = __uint_as_float(raw.z);
    v[j + 3] = __uint_as_float(raw.w);
  }
}
TL_DEVICE void tl_st8(tl_bf16 *p, tl_i64 i, const float (&v)[8]) {
  tl_u32x4 raw;
  raw.x = tl_pack_bf16(v[0], v[1]);
  raw.y = tl_pack_bf16(v[2], v[3]);
  raw.z = tl_pack_bf16(v[4], v[5]);
  raw.w = tl_pack_bf16(v[6], v[7]);
  *reinterpret_cast<tl_u32x4 *>(p + i) = raw;
}
TL_DEVICE void tl_st8(float *p, tl_i64 i, const float (&v)[8]) {
  for (int j = 0; j < 8; j += 4) {
    tl_u32x4 raw;
    raw.x = __float_as_uint(v[j]);
    raw.y = __float_as_uint(v[j + 1]);
    raw.z = __float_as_uint(v[j + 2]);
    raw.w = __float_as_uint(v[j + 3]);
    *reinterpret_cast<tl_u32x4 *>(p + i + j) = raw;
  }
}

// Elements i and i + 1 (i even): one 4-byte store of two bf16, or two floats.
TL_DEVICE void tl_st2(tl_bf16 *p, tl_i64 i, float a, float b) {
  *reinterpret_cast<unsigned *>(p + i) = tl_pack_bf16(a, b);
}
TL_DEVICE void tl_st2(float *p, tl_i64 i, float a, float b) {
  p[i] = a;
  p[i + 1] = b;
}

// 4 floats from index i on in one 16-byte access (16-byte aligned); of other types, 4 loads.
TL_DEVICE void tl_ld4(const float *p, tl_i64 i, float (&v)[4]) {
  const float4 x = *reinterpret_cast<const float4 *>(p + i);
  v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
template <class T> TL_DEVICE void tl_ld4(const T *p, tl_i64 i, float (&v)[4]) {
  for (int j = 0; j < 4; ++j) v[j] = tl_ld(p, i + j);
}

// V elements from index i on: one 16-byte access for V = 8 (rows 16-byte aligned) and for 4
// floats, else V scalar ones.
template <int V, class T> TL_DEVICE void tl_ld_vec(const T *p, tl_i64 i, float (&v)[V]) {
  if constexpr (V == 8) tl_ld8(p, i, v);
  else if constexpr (V == 4) tl_ld4(p, i, v);
  else for (int j = 0; j < V; ++j) v[j] = tl_ld(p, i + j);
}
template <int V, class T> TL_DEVICE void tl_st_vec(T *p, tl_i64 i, const float (&v)[V]) {
  if constexpr (V == 8) tl_st8(p, i, v);
  else for (int j = 0; j < V; ++j) tl_st(p, i + j, v[j]);
}

// ---- reductions ---------------------------------------------------------------------
TL_DEVICE float tl_warp_sum(float v) {
  for (int m = TL_WARP / 2; m > 0; m >>= 1) v += TL_SHFL_XOR(v, m);
  return v;
}
TL_DEVICE float tl_warp_max(float v) {
  for (int m = TL_WARP / 2; m > 0; m >>= 1) v = fmaxf(v, TL_SHFL_XOR(v, m));
  return v;
}
// Block-wide, every thread gets the result; `red` holds one float per warp. The leading
// barrier lets `red` be reused right away.
template <class Combine> TL_DEVICE float tl_block_reduce(float v, float *red, Combine combine) {
  for (int m = TL_WARP / 2; m > 0; m >>= 1) v = combine(v, TL_SHFL_XOR(v, m));
  tl_sync();
  if (threadIdx.x % TL_WARP == 0) red[threadIdx.x / TL_WARP] = v;
  tl_sync();
  float total = red[0];
  for (int w = 1; w < (int)(tl_block_threads() / TL_WARP); ++w) total = combine(total, red[w]);
  return total;
}
TL_DEVICE float tl_block_sum(float v, float *red) {
  return tl_block_reduce(v, red, [](float a, float b) { return a + b; });
}
TL_DEVICE float tl_block_max(float v, float *red) {
  return tl_block_reduce(v, red, [](float a, float b) { return fmaxf(a, b); });
}

// RMSNorm's d x for one element: r (g dy - x r mean), r the row's inverse RMS and mean =
// r Σ(g dy x) / columns (the row kernel and the GEMM epilogue of its backward share it).
TL_DEVICE float tl_rmsnorm_input_grad(float x, float g, float dy, float r, float mean) {
  return r * (g * dy - x * r * mean);
}

// ---- one launch, then its last block --------------------------------------------------
// Whether this block is the last of `arrivals` blocks (the grid by default) to arrive at
// `counter` (a zeroed word); the writes every block made before arriving are visible to
// the last one. Block-wide.
TL_DEVICE bool tl_last_block_arrives(unsigned *counter, unsigned arrivals = 0) {
  __shared__ bool last;
  __threadfence();
  tl_sync();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == (arrivals ? arrivals : tl_grid_blocks()) - 1;
  tl_sync();
  if (last) __threadfence();
  return last;
}
// A float another block wrote, read after tl_last_block_arrives: from L2, past this SM's
// L1 cache, and unlike a volatile read free to be issued beside others.
TL_DEVICE float tl_ld_l2(const float *p) {
#if defined(TL_NVIDIA)
  return __ldcg(p);
#else
  return *(const volatile float *)p;
#endif
}
// The sum of x[0..n) in a fixed order (a stride per thread, then a tree), in fp64: the
// same on every run. Block-wide (tl_block_threads() a power of two, at most 1024); thread 0 gets it.
TL_DEVICE double tl_block_sum_in_order(const volatile float *x, tl_i64 n) {
  __shared__ double partial[1024];
  double total = 0.0;
  for (tl_i64 i = threadIdx.x; i < n; i += tl_block_threads()) total += x[i];
  partial[threadIdx.x] = total;
  tl_sync();
  for (unsigned half = tl_block_threads() / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    tl_sync();
  }
  return partial[0];
}

// ---- chained launches (O3) ----------------------------------------------------------
// A kernel launched as a dependent of the one before it (programmatic dependent launch,
// sm_90) may start early; it must not read what its predecessors write, nor write
// anything, before tl_wait_for_producers(). Without such a launch both are no-ops.
TL_DEVICE void tl_wait_for_producers() {
#if defined(TL_NVIDIA) && __CUDA_ARCH__ >= 900 && !defined(TL_PERSISTENT)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// 2^x on the special-function unit (relative error about 2^-22).
TL_DEVICE float tl_exp2(float x) {
#if defined(TL_NVIDIA)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}
TL_DEVICE void tl_allow_dependents() {
#if defined(TL_NVIDIA) && __CUDA_ARCH__ >= 900 && !defined(TL_DEPENDENTS_AT_START) && !defined(TL_PERSISTENT)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// With TL_DEPENDENTS_AT_START the next kernel may launch as soon as this one starts.
TL_DEVICE void tl_allow_dependents_at_start() {
#if defined(TL_NVIDIA) && __CUDA_ARCH__ >= 900 && defined(TL_DEPENDENTS_AT_START)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- rotary position embedding ------------------------------------------------------
// cos and sin of pos * freq, with freq given as hi + lo floats (from a double): the
// product keeps its rounding error and is reduced by 2*pi in two steps, so the angle is
// right to about 1e-7 at any position of a 2048-token sequence.
TL_DEVICE void tl_rope_cos_sin(float pos, float freqHi, float freqLo, float &c, float &s) {
  const float angle = pos * freqHi;
  const float error = fmaf(pos, freqHi, -angle) + pos * freqLo;
  const float turns = rintf(angle * 0.15915494309189535f);
  float reduced = fmaf(-turns, 6.28318548202514648f, angle);
  reduced = fmaf(-turns, -1.7484555314695172e-7f, reduced) + error;
  __sincosf(reduced, &s, &c);
}
// The rotated value of one element of a pair (first, second).
TL_DEVICE float tl_rope(float first, float second, bool isSecond, float c, float s) {
  return isSecond ? fmaf(first, s, second * c) : fmaf(first, c, -second * s);
}
