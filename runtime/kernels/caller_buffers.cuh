// caller_buffers.cuh: the runtime's own kernels for a forward on the caller's device
// buffers (Backend::forwardOnDevice). The token ids are checked as they come in, and
// the logits and loss are widened to fp32 as they go out, with no host copy and no wait.
// Integer code only, with no prelude, so NVRTC and hipRTC compile it as it is;
// grid-stride loops take any count.

// input[i] = ids[i] for each id in [0, vocab). An id outside that range becomes 0, so no
// kernel of the forward reads outside a table, and sets *bad, which turns the results NaN.
extern "C" __global__ void tl_take_token_ids(const int *ids, int *input, long long count, int vocab, unsigned *bad) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    const int id = ids[i];
    const bool inRange = id >= 0 && id < vocab;
    input[i] = inRange ? id : 0;
    if (!inRange) *bad = 1u;
  }
}

// out[i] = values[i] as fp32 bits: a bf16 value is the top half of its fp32 value, and an
// f32 value is copied as it is. Every value is a quiet NaN when *bad is set.
extern "C" __global__ void tl_give_f32(const void *values, int bf16, unsigned *out, long long count,
                                       const unsigned *bad) {
  const bool poisoned = *bad != 0u;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
    const unsigned bits = bf16 ? (unsigned)((const unsigned short *)values)[i] << 16 : ((const unsigned *)values)[i];
    out[i] = poisoned ? 0x7fc00000u : bits;
  }
}
