#!/usr/bin/python3
"""Ground truth for the hf profile: the bytes PyTorch autograd saves in one decoder layer's forward.

Runs the reference layers of hf_layers.py (Hugging Face modeling code, op for op, eager attention)
at small sizes on the CPU in bf16, counts every tensor autograd saves for backward with
torch.autograd.graph.saved_tensors_hooks (one count per storage, by data_ptr; parameters, buffers
and the inputs every layer shares -- the rotary cos/sin tables and the causal mask -- excluded),
with and without gradient checkpointing (torch.utils.checkpoint, as HF's gradient_checkpointing),
with and without LoRA adapters on every linear layer (bf16 as under DeepSpeed, or fp32 under the
plain Trainer's bf16 autocast: --ddp), and compares each count exactly with the
per-layer activation terms moemem's hf profile gives for the same sizes (printed by
moemem_layer_terms, tests/groundtruth/layer_terms.cpp). Exit 1 on any mismatch.

Only the eager attention kernel is covered: torch 1.13 (Debian's python3-torch) has no
F.scaled_dot_product_attention (torch 2.0), and flash-attention-2 needs a GPU.

Usage: check_hf.py <path to moemem_layer_terms> [--verbose]
"""
import json
import os
import subprocess
import sys

import torch
import torch.utils.checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, SEQ = 2, 16
DTYPE = torch.bfloat16

# Small configs in Hugging Face's config.json form (moemem reads the same files).
MODELS = ["llama", "qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss"]
# LoRA runs: every linear (PEFT's all-linear), and a few targets, which leave the other linears
# frozen and saving no input (HF Mixtral's experts are named w1/w2/w3: attention only there).
TARGETS = {"llama": "q_proj,v_proj,down_proj", "qwen3_moe": "q_proj,v_proj,down_proj", "mixtral": "q_proj,v_proj",
           "deepseek_v3": "q_b_proj,kv_b_proj,down_proj", "gpt_oss": "q_proj,v_proj"}
# The last field: the plain Trainer (--ddp), fp32 adapters under bf16 autocast.
RUNS = [(0, None, False), (8, "all-linear", False), (8, "targets", False), (8, "all-linear", True), (8, "targets", True)]


def load_config(name):
    with open(os.path.join(HERE, "configs", f"{name}.json")) as f:
        c = json.load(f)
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    if c["model_type"] == "qwen3_moe":
        c["qk_norm"] = True
    if c["model_type"] == "mixtral":
        c["num_experts"] = c["num_local_experts"]
        c["moe_intermediate_size"] = c["intermediate_size"]
        c["norm_topk_prob"] = True  # MixtralSparseMoeBlock always renormalises the top-k weights
    return c


def host_scalar(t):
    """A Python number autograd wrapped as a 0-dim float64 tensor (`* scaling` saves it as MulBackward0's
    other): on a GPU it stays a CPU tensor, no device memory."""
    return t.dim() == 0 and t.dtype == torch.float64


# torch 1.13's mean.dim backward saved its input (MeanBackward1._saved_self); from torch 2.0
# derivatives.yaml saves only its sizes and numel (mean_backward(grad, self.sym_sizes(), dim,
# self.sym_numel(), keepdim)). In these layers mean's only input is RMSNorm's pow(2) output, so on
# an old torch the pow outputs are left out: the hf profile models current torch.
OLD_MEAN = hasattr(torch.ones(2, requires_grad=True).mean(0, keepdim=True).grad_fn, "_saved_self")


def saved_by_old_mean(t):
    return OLD_MEAN and t.grad_fn is not None and type(t.grad_fn).__name__ == "PowBackward0"


def saved_bytes(layer, x, rope, mask, mode):
    """Bytes of the distinct storages autograd saves while `layer` runs forward on x."""
    excluded = {p.data_ptr() for p in layer.parameters()} | {t.storage().data_ptr() for t in (*rope, mask)}
    seen = {}

    def pack(t):
        s = t.storage()
        if s.data_ptr() in excluded or s.size() == 0 or host_scalar(t) or saved_by_old_mean(t):
            return t
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if mode == "none":
            y = layer(x, *rope, mask)
        elif mode == "reentrant":
            y = torch.utils.checkpoint.checkpoint(layer, x, *rope, mask, use_reentrant=True)
        else:
            # use_reentrant=False keeps the inputs in the recomputation closure, not as saved
            # tensors; its own hooks take over inside, so the layer input is counted here.
            y = torch.utils.checkpoint.checkpoint(layer, x, *rope, mask, use_reentrant=False)
            seen[x.storage().data_ptr()] = x.storage().nbytes()
    y.float().sum().backward()  # the graph is complete and differentiable
    return sum(seen.values())


def measure(c, moe, lora, targets, mode, ddp=False):
    torch.manual_seed(0)
    hf_layers.LORA_TARGETS = None if targets in (None, "all-linear") else set(targets.split(","))
    hf_layers.LORA_FP32_AUTOCAST = ddp
    layer = hf_layers.DecoderLayer(c, moe, lora).to(DTYPE)
    for mod in layer.modules():  # GptOss's _keep_in_fp32_modules: its norms' weights stay fp32
        if isinstance(mod, hf_layers.GptOssRMSNorm):
            mod.weight.data = mod.weight.data.float()
    if lora:  # PEFT's mark_only_lora_as_trainable: norms, routers and base weights frozen
        for pname, p in layer.named_parameters():
            p.requires_grad_("lora_" in pname)
            if ddp and "lora_" in pname:
                p.data = p.data.to(torch.float32)
    h = c["hidden_size"]
    rope_dim = c["qk_rope_head_dim"] if c["model_type"] == "deepseek_v3" else c["head_dim"]
    rope = hf_layers.rope_tables(BATCH, SEQ, rope_dim, DTYPE)
    mask = hf_layers.causal_mask(BATCH, SEQ, DTYPE)
    # The layer input is the previous layer's output: a non-leaf that requires grad.
    x0 = torch.randn(BATCH, SEQ, h, dtype=DTYPE, requires_grad=True)
    x = x0 * 1.0
    return saved_bytes(layer, x, rope, mask, mode)


def moemem_terms(exe, name, lora, targets, recompute, ddp=False):
    # The reference layers follow transformers 4.x's modeling code (the per-expert loop; 5.x's MoE
    # blocks are checked against a GPU measurement instead, tests/unit/test_hf_profile.cpp).
    args = [exe, "--model", os.path.join(HERE, "configs", f"{name}.json"), "--profile", "hf", "--attention", "eager",
            "--micro-batch", str(BATCH), "--seq-len", str(SEQ), "--recompute", recompute, "--transformers-version", "4"]
    if lora:
        args += ["--finetune", "lora", "--lora-rank", str(lora), "--lora-targets", targets]
    if ddp:
        args += ["--ddp"]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=60).stdout
    return json.loads(out)


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    exe, verbose = sys.argv[1], "--verbose" in sys.argv
    failures = 0
    for name in MODELS:
        c = load_config(name)
        for lora, targets, ddp in RUNS:
            targets = TARGETS[name] if targets == "targets" else targets
            ledgers = {r: moemem_terms(exe, name, lora, targets, r, ddp) for r in ("none", "full")}
            for kind in ledgers["none"]:
                for mode, recompute in (("none", "none"), ("reentrant", "full"), ("closure", "full")):
                    truth = measure(c, kind == "moe", lora, targets, mode, ddp)
                    model = ledgers[recompute][kind]["kept_bytes"]
                    ok = truth == model
                    failures += not ok
                    if verbose or not ok:
                        print(f"{'ok  ' if ok else 'FAIL'} {name:12s} {kind:5s} lora={lora}{' ddp' if ddp else ''} "
                              f"{targets or '':24s} {mode:9s} "
                              f"autograd {truth:8d} B  moemem {model:8d} B")
                        if not ok:
                            for t in ledgers[recompute][kind]["terms"]:
                                print(f"        {t['bytes']:8d} {t['name']}")
    print(f"hf ground truth: {'all match' if failures == 0 else f'{failures} mismatches'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
