"""Our own PyTorch TinyLlama: the forward tlc compiles (TINYLLAMA.md), written plainly.

Loads the safetensors tlc writes (`tlc --run --save-weights=w.safetensors`, Hugging Face
Llama keys), so the same weights run in both. RoPE rotates adjacent pairs (the workshop,
`style = "adjacent"`) or halves (Hugging Face checkpoints, `"half"`); query head h reads
kv head h // (heads / kv_heads).

For generation (bench/generate.py) it also runs with a static KV cache, as tlc's
@prefill and @decode do: `new_cache` makes the cache [layers, batch, kv heads, context,
head dim], `forward_cached` runs tokens at each sequence's own positions, writing their
keys and values there and attending over the cache up to them (a fixed-shape step, so a
decode step can be captured as a CUDA graph).
"""
import math

import torch
import torch.nn.functional as F

CONFIGS = {
    "workshop": dict(vocab=1000, hidden=512, layers=8, heads=8, kv_heads=4, ffn=2048, eps=1e-6,
                     tied=True, rope="adjacent", theta=10000.0),
    "tinyllama-1.1b": dict(vocab=32000, hidden=2048, layers=22, heads=32, kv_heads=4, ffn=5632, eps=1e-5,
                           tied=False, rope="half", theta=10000.0),
}


def rms_norm(x, gain, eps):
    # In fp32, as tlc's kernels do, then back to the storage dtype.
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * gain.float()).to(x.dtype)


def rope_tables(seq, head_dim, theta, device):
    pairs = torch.arange(head_dim // 2, dtype=torch.float64, device=device)
    frequencies = theta ** (-2.0 * pairs / head_dim)
    angles = torch.arange(seq, dtype=torch.float64, device=device)[:, None] * frequencies[None, :]
    return angles.cos().float(), angles.sin().float()  # [S, D/2]


def apply_rope(x, cos, sin, style):
    # x: [B, S, H, D]; pair i rotated by angle p * theta^(-2i/D), p the token's position:
    # cos, sin [S, D/2] for positions 0..S-1, or [B, S, D/2] for each sequence's own
    x32 = x.float()
    if cos.dim() == 2:
        c, s = cos[None, :, None, :], sin[None, :, None, :]
    else:
        c, s = cos[:, :, None, :], sin[:, :, None, :]
    if style == "adjacent":
        first, second = x32[..., 0::2], x32[..., 1::2]
        out = torch.stack((first * c - second * s, first * s + second * c), dim=-1).flatten(-2)
    else:
        half = x32.shape[-1] // 2
        first, second = x32[..., :half], x32[..., half:]
        out = torch.cat((first * c - second * s, first * s + second * c), dim=-1)
    return out.to(x.dtype)


class TinyLlama(torch.nn.Module):
    def __init__(self, name, weights, dtype, device):
        super().__init__()
        self.cfg = dict(CONFIGS[name])
        self.dtype = dtype
        self.w = {key: value.to(device=device, dtype=dtype) for key, value in weights.items()}
        self.head_dim = self.cfg["hidden"] // self.cfg["heads"]

    def forward(self, ids, cos, sin, weights=None):
        # weights: tensors by key to compute with instead of the model's own (bench/train.py
        # passes bf16 casts of its fp32 parameters, made inside the step so gradients reach them)
        c, w = self.cfg, (self.w if weights is None else weights)
        scale = 1.0 / math.sqrt(self.head_dim)
        logits = self.logits(ids, cos, sin, w, lambda layer, q, k, v: F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale, enable_gqa=True))
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, c["vocab"]), ids[:, 1:].reshape(-1))
        return logits, loss

    def logits(self, ids, cos, sin, w, attend):
        """The logits of `ids` [B, S], RoPE by `cos`, `sin`; attend(layer, q [B, H, S, D],
        k, v [B, Hkv, S, D]) -> [B, H, S, D] is each layer's attention."""
        c = self.cfg
        B, S = ids.shape
        H, Hkv, D = c["heads"], c["kv_heads"], self.head_dim
        x = w["model.embed_tokens.weight"][ids]
        for layer in range(c["layers"]):
            p = f"model.layers.{layer}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], c["eps"])
            q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, S, H, D)
            k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, S, Hkv, D)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, S, Hkv, D)
            q, k = apply_rope(q, cos, sin, c["rope"]), apply_rope(k, cos, sin, c["rope"])
            a = attend(layer, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            x = x + a.transpose(1, 2).reshape(B, S, H * D) @ w[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], c["eps"])
            g = h @ w[p + "mlp.gate_proj.weight"].T
            u = h @ w[p + "mlp.up_proj.weight"].T
            x = x + (F.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
        h = rms_norm(x, w["model.norm.weight"], c["eps"])
        head = w["model.embed_tokens.weight"] if c["tied"] else w["lm_head.weight"]
        return h @ head.T

    def new_cache(self, batch, context):
        """Keys and values of every layer, [layers, batch, kv heads, context, head dim], zeros."""
        c = self.cfg
        shape = (c["layers"], batch, c["kv_heads"], context, self.head_dim)
        device = self.w["model.embed_tokens.weight"].device
        return (torch.zeros(shape, dtype=self.dtype, device=device), torch.zeros(shape, dtype=self.dtype, device=device))

    def forward_cached(self, ids, positions, cache, cos_table, sin_table, prompt=False):
        """Token s of sequence b (ids [B, S]) at position positions[b] + s: RoPE there (rows
        of cos_table, sin_table [context, D/2]), its key and value written into the cache
        there, attention over cache rows 0..that position. Returns the logits [B, S, V].
        `prompt`: the positions are 0, and attention is causal over the tokens' own keys
        (flash attention rather than a masked pass over the whole cache)."""
        B, S = ids.shape
        at = positions[:, None] + torch.arange(S, device=ids.device)[None, :]  # [B, S]
        context = cache[0].shape[3]
        visible = torch.arange(context, device=ids.device)[None, None, None, :] <= at[:, None, :, None]
        rows = torch.arange(B, device=ids.device)[:, None].expand(B, S)
        scale = 1.0 / math.sqrt(self.head_dim)

        def attend(layer, q, k, v):
            keys, values = cache[0][layer], cache[1][layer]  # [B, Hkv, context, D], views
            keys[rows, :, at] = k.transpose(1, 2)
            values[rows, :, at] = v.transpose(1, 2)
            if prompt:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
            return F.scaled_dot_product_attention(q, keys, values, attn_mask=visible, scale=scale, enable_gqa=True)

        return self.logits(ids, cos_table[at], sin_table[at], self.w, attend)
