"""Small reference decoder layers that follow Hugging Face transformers' modeling code op for op.

Written from huggingface/transformers (commits 00d4b3d2 for qwen3_moe, 00b676f8 for deepseek_v3;
llama and mixtral share the same functions there):
  *RMSNorm.forward              upcast to fp32, pow(2).mean, rsqrt, multiply, cast back, times weight
  apply_rotary_pos_emb          q * cos + rotate_half(q) * sin (cos, sin from the model's rotary
                                embedding, computed once per forward under no_grad)
  repeat_kv, eager_attention_forward
                                matmul(q, k^T) * scaling + mask, softmax(dtype=fp32).to(dtype),
                                dropout, matmul(probs, v), transpose(1, 2).contiguous()
  LlamaMLP / *MLP.forward       down_proj(act_fn(gate_proj(x)) * up_proj(x))
  MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock.forward
                                router softmax(fp32), topk, (norm_topk_prob) /= sum, cast, one_hot
                                mask, loop over hit experts: hidden[None, top_x], expert MLP,
                                * routing_weights[top_x, idx, None], index_add_
  DeepseekV3TopkRouter / DeepseekV3MoE.moe / DeepseekV3Attention.forward
                                fp32 router (sigmoid, grouped top-k under no_grad, gather, norm,
                                scaling), expert loop in fp32 accumulation, shared experts; MLA with
                                q_a/q_b, kv_a_proj_with_mqa split, kv_a_layernorm, kv_b_proj, RoPE on
                                the rope slices, cat of nope and rope parts
Only the code paths training takes (no cache, eager attention, dropout 0) are kept. The weights are
plain nn.Parameters so that the counter can exclude them.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(q, k, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(x, n_rep):
    b, kvh, s, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kvh, n_rep, s, d).reshape(b, kvh * n_rep, s, d)


def eager_attention(q, k, v, mask, scaling, groups, dropout):
    k = repeat_kv(k, groups)
    v = repeat_kv(v, groups)
    w = torch.matmul(q, k.transpose(2, 3)) * scaling
    w = w + mask[:, :, :, : k.shape[-2]]
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    w = F.dropout(w, p=dropout, training=True)
    out = torch.matmul(w, v)
    return out.transpose(1, 2).contiguous()


# PEFT's target_modules: None targets every nn.Linear of a decoder layer (PEFT's all-linear: the
# softmax routers too; DeepSeek-V3's router is a bare parameter), else a set of module names.
LORA_TARGETS = None
# The plain Trainer (moemem's --ddp): PEFT keeps the adapters in fp32 (autocast_adapter_dtype) and
# the Trainer runs forward under bf16 autocast. Set by check_hf.py per run.
LORA_FP32_AUTOCAST = False


class Linear(nn.Module):
    """nn.Linear, optionally with a PEFT LoRA adapter (peft/tuners/lora/layer.py Linear.forward:
    result = base_layer(x); result = result + lora_B(lora_A(dropout(x))) * scaling)."""

    def __init__(self, n_in, n_out, lora_rank, name, bias=False):
        super().__init__()
        if LORA_TARGETS is not None and name not in LORA_TARGETS:
            lora_rank = 0
        self.base = nn.Linear(n_in, n_out, bias=bias)
        self.lora_rank = lora_rank
        if lora_rank:
            self.base.weight.requires_grad_(False)
            self.lora_a = nn.Linear(n_in, lora_rank, bias=False)
            self.lora_b = nn.Linear(lora_rank, n_out, bias=False)
            self.scaling = 2.0

    def forward(self, x):
        y = self.base(x)
        if self.lora_rank and LORA_FP32_AUTOCAST:
            # PEFT's _cast_input_dtype casts x to the adapter's fp32, and CUDA autocast runs lora_A
            # and lora_B as bf16 GEMMs on bf16 casts of their inputs and of the fp32 weights (the
            # cast op of the cast x saves nothing; each GEMM saves its bf16 operands). Written out
            # by hand: CPU autocast's op lists are not CUDA's.
            bf16 = torch.bfloat16
            a = F.linear(x.to(torch.float32).to(bf16), self.lora_a.weight.to(bf16))
            y = y + F.linear(a, self.lora_b.weight.to(bf16)) * self.scaling
        elif self.lora_rank:
            # lora_dropout is nn.Identity when lora_dropout == 0 (PEFT's update_layer)
            y = y + self.lora_b(self.lora_a(x)) * self.scaling
        return y


class MLP(nn.Module):
    def __init__(self, h, ffn, lora):
        super().__init__()
        self.gate_proj = Linear(h, ffn, lora, "gate_proj")
        self.up_proj = Linear(h, ffn, lora, "up_proj")
        self.down_proj = Linear(ffn, h, lora, "down_proj")

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GqaAttention(nn.Module):
    def __init__(self, c, lora):
        super().__init__()
        h, d = c["hidden_size"], c["head_dim"]
        self.heads, self.kv_heads, self.d = c["num_attention_heads"], c["num_key_value_heads"], d
        self.q_proj = Linear(h, self.heads * d, lora, "q_proj")
        self.k_proj = Linear(h, self.kv_heads * d, lora, "k_proj")
        self.v_proj = Linear(h, self.kv_heads * d, lora, "v_proj")
        self.o_proj = Linear(self.heads * d, h, lora, "o_proj")
        self.qk_norm = c.get("qk_norm", False)
        if self.qk_norm:  # Qwen3: RMSNorm over head_dim on the projections' views
            self.q_norm, self.k_norm = RMSNorm(d), RMSNorm(d)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        shape = (b, s, -1, self.d)
        q, k = self.q_proj(x).view(shape), self.k_proj(x).view(shape)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rope(q, k, cos, sin)
        out = eager_attention(q, k, v, mask, self.d ** -0.5, self.heads // self.kv_heads, 0.0)
        return self.o_proj(out.reshape(b, s, -1).contiguous())


class MlaAttention(nn.Module):
    def __init__(self, c, lora):
        super().__init__()
        h = c["hidden_size"]
        self.heads = c["num_attention_heads"]
        self.nope, self.rope, self.vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
        self.qk = self.nope + self.rope
        self.kv_rank = c["kv_lora_rank"]
        self.q_a_proj = Linear(h, c["q_lora_rank"], lora, "q_a_proj")
        self.q_a_layernorm = RMSNorm(c["q_lora_rank"])
        self.q_b_proj = Linear(c["q_lora_rank"], self.heads * self.qk, lora, "q_b_proj")
        self.kv_a_proj_with_mqa = Linear(h, self.kv_rank + self.rope, lora, "kv_a_proj_with_mqa")
        self.kv_a_layernorm = RMSNorm(self.kv_rank)
        self.kv_b_proj = Linear(self.kv_rank, self.heads * (self.nope + self.vd), lora, "kv_b_proj")
        self.o_proj = Linear(self.heads * self.vd, h, lora, "o_proj")

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, s, -1, self.qk).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [self.nope, self.rope], dim=-1)
        ckv = self.kv_a_proj_with_mqa(x)
        k_pass, k_rot = torch.split(ckv, [self.kv_rank, self.rope], dim=-1)
        k_pass = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(b, s, -1, self.nope + self.vd).transpose(1, 2)
        k_pass, v = torch.split(k_pass, [self.nope, self.vd], dim=-1)
        k_rot = k_rot.view(b, 1, s, self.rope)
        q_rot, k_rot = apply_rope(q_rot, k_rot, cos, sin)
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        q = torch.cat((q_pass, q_rot), dim=-1)
        k = torch.cat((k_pass, k_rot), dim=-1)
        out = eager_attention(q, k, v, mask, self.qk ** -0.5, 1, 0.0)
        return self.o_proj(out.reshape(b, s, -1).contiguous())


class SoftmaxMoe(nn.Module):
    """Mixtral's and Qwen3-MoE's sparse MoE block (softmax router, loop over the hit experts)."""

    def __init__(self, c, lora):
        super().__init__()
        h, n = c["hidden_size"], c["num_experts"]
        self.top_k, self.norm = c["num_experts_per_tok"], c["norm_topk_prob"]
        # nn.Linear in HF's code, so PEFT's all-linear adapts it too (only the output head is left out)
        self.gate = Linear(h, n, lora, "gate")
        self.experts = nn.ModuleList([MLP(h, c["moe_intermediate_size"], lora) for _ in range(n)])

    def forward(self, x):
        b, s, h = x.shape
        x = x.view(-1, h)
        logits = self.gate(x)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, sel = torch.topk(w, self.top_k, dim=-1)
        if self.norm:
            w /= w.sum(dim=-1, keepdim=True)
        w = w.to(x.dtype)
        out = torch.zeros((b * s, h), dtype=x.dtype)
        mask = F.one_hot(sel, num_classes=len(self.experts)).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            idx, top_x = torch.where(mask[e].squeeze(0))
            cur = x[None, top_x].reshape(-1, h)
            cur = self.experts[e](cur) * w[top_x, idx, None]
            out.index_add_(0, top_x, cur.to(x.dtype))
        return out.reshape(b, s, h)


class DeepseekMoe(nn.Module):
    def __init__(self, c, lora):
        super().__init__()
        h, n = c["hidden_size"], c["n_routed_experts"]
        self.n, self.top_k, self.h = n, c["num_experts_per_tok"], h
        self.n_group, self.topk_group = c["n_group"], c["topk_group"]
        self.weight = nn.Parameter(torch.randn(n, h) * 0.02)  # DeepseekV3TopkRouter.weight
        self.bias = torch.zeros(n)  # e_score_correction_bias, a buffer
        self.experts = nn.ModuleList([MLP(h, c["moe_intermediate_size"], lora) for _ in range(n)])
        self.shared_experts = MLP(h, c["moe_intermediate_size"] * c["n_shared_experts"], lora)

    @torch.no_grad()
    def topk_indices(self, scores):
        sc = scores.view(-1, self.n) + self.bias.unsqueeze(0)
        g = sc.view(-1, self.n_group, self.n // self.n_group).topk(2, dim=-1)[0].sum(dim=-1)
        gi = torch.topk(g, k=self.topk_group, dim=-1, sorted=False)[1]
        gm = torch.zeros_like(g)
        gm.scatter_(1, gi, 1)
        sm = gm.unsqueeze(-1).expand(-1, self.n_group, self.n // self.n_group).reshape(-1, self.n)
        sc = sc.masked_fill(~sm.bool(), 0.0)
        return torch.topk(sc, k=self.top_k, dim=-1, sorted=False)[1]

    def forward(self, x):
        residual, shape = x, x.shape
        xs = x.view(-1, self.h)
        logits = F.linear(xs.type(torch.float32), self.weight.type(torch.float32))
        scores = logits.sigmoid()
        ti = self.topk_indices(scores)
        tw = scores.gather(1, ti)
        tw /= tw.sum(dim=-1, keepdim=True) + 1e-20
        tw = tw * 2.5  # routed_scaling_factor
        out = torch.zeros_like(xs, dtype=tw.dtype)
        mask = F.one_hot(ti, num_classes=self.n).permute(2, 0, 1)
        for e in range(self.n):
            tok, wi = torch.where(mask[e])
            if tok.numel() > 0:
                ew = tw[tok, wi]
                y = self.experts[e](xs[tok]) * ew.unsqueeze(-1)
                out.index_add_(0, tok, y)
        y = out.type(xs.dtype).view(*shape)
        return y + self.shared_experts(residual)


class GptOssRMSNorm(RMSNorm):
    """GptOssRMSNorm: (weight * x).to(dtype), the weight kept in fp32 (_keep_in_fp32_modules)."""

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return (self.weight * x).to(dtype)


def gpt_oss_rope(x, cos, sin):
    """_apply_rotary_emb: the halves times cos and sin, concatenated."""
    first, second = torch.chunk(x, 2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


class GptOssAttention(nn.Module):
    """GptOssAttention.forward with eager_attention_forward: biased projections, RoPE on halves, the
    scores concatenated with each head's sink logit, shifted by their maximum, softmaxed in bf16,
    the sink column dropped."""

    def __init__(self, c, lora):
        super().__init__()
        h, d = c["hidden_size"], c["head_dim"]
        self.heads, self.kv_heads, self.d = c["num_attention_heads"], c["num_key_value_heads"], d
        self.q_proj = Linear(h, self.heads * d, lora, "q_proj", bias=True)
        self.k_proj = Linear(h, self.kv_heads * d, lora, "k_proj", bias=True)
        self.v_proj = Linear(h, self.kv_heads * d, lora, "v_proj", bias=True)
        self.o_proj = Linear(self.heads * d, h, lora, "o_proj", bias=True)
        self.sinks = nn.Parameter(torch.randn(self.heads))

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, -1, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, -1, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, self.d).transpose(1, 2)
        # GptOssRotaryEmbedding's tables are head_dim / 2 wide (emb = freqs): views of the shared ones
        cos, sin = cos[..., : self.d // 2].unsqueeze(1), sin[..., : self.d // 2].unsqueeze(1)
        q, k = gpt_oss_rope(q, cos, sin), gpt_oss_rope(k, cos, sin)
        groups = self.heads // self.kv_heads
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        w = torch.matmul(q, k.transpose(2, 3)) * (self.d ** -0.5)
        w = w + mask[:, :, :, : k.shape[-2]]
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, s, -1)
        logits = torch.cat([w, sinks], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        probs = F.softmax(logits, dim=-1, dtype=logits.dtype)
        scores = F.dropout(probs[..., :-1], p=0.0, training=True)
        out = torch.matmul(scores, v).transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(b, s, -1))


class GptOssMoe(nn.Module):
    """GptOssTopKRouter and GptOssExperts.forward's training loop (3-D expert parameters indexed per
    hit expert, clamped SwiGLU with alpha 1.702 and limit 7, biases)."""

    def __init__(self, c):
        super().__init__()
        h, n, f = c["hidden_size"], c["num_local_experts"], c["intermediate_size"]
        self.h, self.n, self.top_k = h, n, c["num_experts_per_tok"]
        self.weight = nn.Parameter(torch.randn(n, h) * 0.02)
        self.bias = nn.Parameter(torch.randn(n) * 0.02)
        self.gate_up_proj = nn.Parameter(torch.randn(n, h, 2 * f) * 0.02)
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(n, 2 * f))
        self.down_proj = nn.Parameter(torch.randn(n, f, h) * 0.02)
        self.down_proj_bias = nn.Parameter(torch.zeros(n, h))
        self.alpha, self.limit = 1.702, 7.0

    def forward(self, x):
        b = x.shape[0]
        x = x.reshape(-1, self.h)
        logits = F.linear(x, self.weight, self.bias)
        top, sel = torch.topk(logits, self.top_k, dim=-1)
        top = F.softmax(top, dim=1, dtype=top.dtype)
        weights = torch.zeros_like(logits).scatter_(1, sel, top)
        out = torch.zeros_like(x)
        with torch.no_grad():
            mask = F.one_hot(sel, num_classes=self.n).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit[:]:
            with torch.no_grad():
                _, tok = torch.where(mask[e[0]])
            cur = x[tok]
            gate_up = cur @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
            gate = gate.clamp(min=None, max=self.limit)
            up = up.clamp(min=-self.limit, max=self.limit)
            glu = gate * torch.sigmoid(gate * self.alpha)
            y = ((up + 1) * glu) @ self.down_proj[e] + self.down_proj_bias[e]
            y = y[0] * weights[tok, e, None]
            out.index_add_(0, tok, y.to(x.dtype))
        return out.view(b, -1, self.h)


class DecoderLayer(nn.Module):
    """*DecoderLayer.forward: residual + attn(input_layernorm(x)); residual + mlp(post_attention_layernorm(x))."""

    def __init__(self, c, moe, lora):
        super().__init__()
        h = c["hidden_size"]
        if c["model_type"] == "gpt_oss":
            self.input_layernorm, self.post_attention_layernorm = GptOssRMSNorm(h), GptOssRMSNorm(h)
            self.self_attn, self.mlp = GptOssAttention(c, lora), GptOssMoe(c)
            return
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(h), RMSNorm(h)
        mla = c["model_type"] == "deepseek_v3"
        self.self_attn = MlaAttention(c, lora) if mla else GqaAttention(c, lora)
        if not moe:
            self.mlp = MLP(h, c["intermediate_size"], lora)
        elif mla:
            self.mlp = DeepseekMoe(c, lora)
        else:
            self.mlp = SoftmaxMoe(c, lora)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def rope_tables(batch, seq, dim, dtype):
    """The model's rotary embedding (*RotaryEmbedding.forward, no_grad): cos, sin of b x s x dim."""
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    pos = torch.arange(seq).float()
    freqs = torch.outer(pos, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None].expand(batch, -1, -1).to(dtype), emb.sin()[None].expand(batch, -1, -1).to(dtype)


def causal_mask(batch, seq, dtype):
    """create_causal_mask's eager form: b x 1 x s x s additive mask (min where masked)."""
    m = torch.full((seq, seq), torch.finfo(dtype).min, dtype=dtype).triu(1)
    return m[None, None].expand(batch, 1, seq, seq)
