#!/usr/bin/env python3
"""What autograd saves in one Hugging Face MoE decoder layer on a GPU, per module, for each experts
implementation transformers offers (its default grouped_mm, and the loop over hit experts).

Run on a machine with one CUDA GPU, PyTorch and transformers. Builds each model from its config
with one decoder layer (an MoE one) and random bf16 weights, runs a forward under
torch.autograd.graph.saved_tensors_hooks and writes, per module (the innermost one running when the
tensor was saved), every saved tensor's shape, dtype and bytes: each storage counted once,
parameters left out. Under bf16 autocast, as --profile hf --ddp.

  python3 scripts/measure/hf_saved_tensors.py OUT.jsonl
"""
import json
import sys

MODELS = "tests/data/validation/models/"
CASES = [("qwen3-30b-a3b-4l.json", {}), ("mixtral-8x7b-2l.json", {}),
         ("moonlight-16b-4l.json", {"first_k_dense_replace": 0}), ("../../../../data/models/gpt-oss-20b.json", {})]


def run(config, overrides, impl, tokens, out):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(MODELS + config)
    cfg.num_hidden_layers = 1
    cfg.use_cache = False
    for k, v in overrides.items():
        setattr(cfg, k, v)
    if hasattr(cfg, "layer_types") and cfg.layer_types:
        cfg.layer_types = cfg.layer_types[:1]
    if getattr(cfg, "quantization_config", None) is not None:
        cfg.quantization_config = None
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="eager" if "gpt-oss" in config else "sdpa",
                                                 experts_implementation=impl)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    stack = ["model"]
    names = {m: n for n, m in model.named_modules()}
    def enter(mod, args):
        stack.append(names[mod])

    def leave(mod, args, output):  # a hook that returns something replaces the output: return None
        stack.pop()
    for m in model.modules():
        m.register_forward_pre_hook(enter)
        m.register_forward_hook(leave)
    seen, rows = set(), []

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and ptr not in seen:
            seen.add(ptr)
            rows.append(dict(module=stack[-1], shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""),
                             bytes=t.untyped_storage().nbytes()))
        return t

    ids = torch.randint(0, cfg.vocab_size, (1, tokens), device="cuda")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    per = {}
    for r in rows:
        per[r["module"]] = per.get(r["module"], 0) + r["bytes"]
    out.write(json.dumps(dict(config=config, impl=impl, tokens=tokens, total=sum(per.values()), per_module=per,
                              tensors=rows)) + "\n")
    out.flush()


def main():
    with open(sys.argv[1], "a") as out:
        for config, overrides in CASES:
            for impl in ("grouped_mm", "eager"):
                try:
                    run(config, overrides, impl, 1024, out)
                except Exception as e:  # write what failed and go on
                    import traceback
                    out.write(json.dumps(dict(config=config, impl=impl, error=repr(e)[:1000],
                                              trace=traceback.format_exc()[-2000:])) + "\n")


if __name__ == "__main__":
    main()
