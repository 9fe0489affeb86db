#!/usr/bin/env python3
"""Measure the GPU memory of real Hugging Face training steps, for moemem's hf profile.

Run on a machine with one CUDA GPU, PyTorch and transformers (PEFT for the LoRA cases). Each case
runs in a child process of its own (a clean allocator and its own CUDA context): it builds the
model from a config file under tests/data/validation/models with random weights in bf16 on the
GPU, and trains three steps on random token ids of a fixed length (no padding, labels = inputs),
as the Trainer does with --ddp's settings: bf16 autocast, torch.optim.AdamW(fused=True) (the
Trainer's default optim adamw_torch_fused), clip_grad_norm_(1.0), zero_grad(set_to_none=True).
A case with "trainer": true runs the real transformers Trainer instead of that loop.

Written per case, one JSON line each: torch.cuda.max_memory_allocated and max_memory_reserved
over the three steps (the statistics are reset after the model is built), what was allocated
after the build (the weights), the device memory NVML reports used at the end of the steps, and
the parameter counts. The matching moemem command of each case is in CASES ("args").

  python3 scripts/measure/hf_step_memory.py OUT.jsonl            every case
  python3 scripts/measure/hf_step_memory.py --case ID OUT.jsonl  one case (what the driver runs)
"""
import json
import os
import subprocess
import sys
import time

MODELS = "tests/data/validation/models/"

# id, config, attention, micro-batch, seq, gradient checkpointing, LoRA rank (0: full), trainer.
CASES = [
    dict(id="llama32-3b-sdpa-b4", config="llama-3.2-3b.json", attn="sdpa", mb=4, seq=2048),
    dict(id="llama32-3b-sdpa-b4-trainer", config="llama-3.2-3b.json", attn="sdpa", mb=4, seq=2048, trainer=True),
    dict(id="llama32-3b-sdpa-b8-gc", config="llama-3.2-3b.json", attn="sdpa", mb=8, seq=2048, gc=True),
    dict(id="llama32-3b-eager-b2", config="llama-3.2-3b.json", attn="eager", mb=2, seq=2048),
    dict(id="llama32-3b-lora16-b8", config="llama-3.2-3b.json", attn="sdpa", mb=8, seq=2048, lora=16),
    dict(id="qwen3-30b-a3b-4l-sdpa-b4", config="qwen3-30b-a3b-4l.json", attn="sdpa", mb=4, seq=2048),
    dict(id="mixtral-8x7b-2l-sdpa-b4", config="mixtral-8x7b-2l.json", attn="sdpa", mb=4, seq=2048),
    dict(id="moonlight-16b-4l-eager-b2", config="moonlight-16b-4l.json", attn="eager", mb=2, seq=2048),
    # transformers 4.x's loop over the hit experts (transformers 5 defaults to grouped_mm)
    dict(id="qwen3-30b-a3b-4l-sdpa-b4-loop", config="qwen3-30b-a3b-4l.json", attn="sdpa", mb=4, seq=2048,
         experts="eager"),
    # the allocator's expandable segments: how much of the checkpointed run's reserve is fragmentation
    dict(id="llama32-3b-sdpa-b8-gc-expandable", config="llama-3.2-3b.json", attn="sdpa", mb=8, seq=2048, gc=True,
         alloc_conf="expandable_segments:True"),
    # MoE under gradient checkpointing, LoRA on an MoE model, MLA under sdpa
    dict(id="qwen3-30b-a3b-4l-sdpa-b8-gc", config="qwen3-30b-a3b-4l.json", attn="sdpa", mb=8, seq=2048, gc=True),
    dict(id="qwen3-30b-a3b-4l-lora16-b4", config="qwen3-30b-a3b-4l.json", attn="sdpa", mb=4, seq=2048, lora=16),
    dict(id="moonlight-16b-4l-sdpa-b4", config="moonlight-16b-4l.json", attn="sdpa", mb=4, seq=2048),
    dict(id="moonlight-16b-4l-sdpa-b8-gc", config="moonlight-16b-4l.json", attn="sdpa", mb=8, seq=2048, gc=True),
]
EXTRA = {"qwen3-30b-a3b-4l-sdpa-b4-loop", "llama32-3b-sdpa-b8-gc-expandable"}
EXTRA2 = {"qwen3-30b-a3b-4l-sdpa-b8-gc", "qwen3-30b-a3b-4l-lora16-b4", "moonlight-16b-4l-sdpa-b4",
          "moonlight-16b-4l-sdpa-b8-gc"}
for c in CASES:
    a = ["--model", MODELS + c["config"], "--profile", "hf", "--ddp", "--dp", "1",
         "--micro-batch", str(c["mb"]), "--global-batch", str(c["mb"]), "--seq-len", str(c["seq"]),
         "--attention", c["attn"]]
    if c.get("gc"):
        a += ["--recompute", "full"]
    if c.get("lora"):
        a += ["--finetune", "lora", "--lora-rank", str(c["lora"]), "--lora-targets", "all-linear"]
    c["args"] = a


def run_case(c):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    gib = 2 ** 30
    torch.manual_seed(0)
    torch.cuda.init()
    cfg = AutoConfig.from_pretrained(MODELS + c["config"])
    cfg.use_cache = False
    kw = {"experts_implementation": c["experts"]} if c.get("experts") else {}
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=c["attn"], **kw)
        except TypeError:  # a transformers without the keyword: through the config
            cfg._experts_implementation = c["experts"]
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=c["attn"])
    params = sum(p.numel() for p in model.parameters())
    if c.get("lora"):
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=c["lora"], lora_alpha=2 * c["lora"],
                                                 target_modules="all-linear", lora_dropout=0.0))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if c.get("gc"):
        model.gradient_checkpointing_enable()
    model.train()
    torch.cuda.synchronize()
    after_build = torch.cuda.memory_allocated()
    ids = torch.randint(0, cfg.vocab_size, (3, c["mb"], c["seq"]), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    steps = []
    t0 = time.time()
    if c.get("trainer"):
        from transformers import Trainer, TrainingArguments, TrainerCallback

        class Peaks(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):
                steps.append(torch.cuda.max_memory_allocated() / gib)

        data = [{"input_ids": ids[i // c["mb"], i % c["mb"]].cpu(),
                 "labels": ids[i // c["mb"], i % c["mb"]].cpu()} for i in range(3 * c["mb"])]
        args = TrainingArguments(output_dir="/tmp/hf_step_memory", per_device_train_batch_size=c["mb"],
                                 max_steps=3, bf16=True, learning_rate=1e-5, logging_steps=1000,
                                 save_strategy="no", report_to=[], dataloader_num_workers=0,
                                 gradient_checkpointing=bool(c.get("gc")))
        tr = Trainer(model=model, args=args, train_dataset=data)
        optim_name = str(args.optim)
        tr.train()
    else:
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, fused=True)
        optim_name = "torch.optim.AdamW(fused=True)"
        for i in range(3):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids[i], labels=ids[i]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            steps.append(torch.cuda.max_memory_allocated() / gib)
    torch.cuda.synchronize()
    if c.get("snapshot"):
        # The allocator's segments after the steps (reserved stays at its peak: nothing is
        # released): each segment's size and its blocks' sizes and states, to see where the
        # reserve that is not allocated sits.
        segs = [dict(size=s["total_size"], allocated=s["allocated_size"], stream=s["stream"],
                     blocks=[[b["size"], b["state"]] for b in s["blocks"]]) for s in torch.cuda.memory_snapshot()]
        with open(c["snapshot"], "w") as f:
            json.dump(segs, f)
    used = None
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        used = pynvml.nvmlDeviceGetMemoryInfo(h).used
    except Exception as e:  # NVML missing: leave it out
        used = repr(e)
    free, total = torch.cuda.mem_get_info()
    return dict(id=c["id"], args=c["args"], ok=True, seconds=round(time.time() - t0, 1),
                torch=torch.__version__, transformers=transformers.__version__,
                gpu=torch.cuda.get_device_name(0), optim=optim_name,
                attn_implementation=getattr(cfg, "_attn_implementation", None),
                experts_implementation=str(getattr(cfg, "_experts_implementation", None)),
                gradient_checkpointing=bool(getattr(model, "is_gradient_checkpointing", False)),
                params=params, trainable=trainable, after_build_bytes=after_build,
                max_allocated_bytes=torch.cuda.max_memory_allocated(),
                max_reserved_bytes=torch.cuda.max_memory_reserved(),
                reserved_now_bytes=torch.cuda.memory_reserved(),
                nvml_used_bytes=used, mem_get_info_used_bytes=total - free,
                peak_after_each_step_gib=[round(s, 3) for s in steps])


def nvml_used():
    import pynvml
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used


def context_probe():
    """Device memory outside the caching allocator as a process uses more of CUDA: NVML's used
    bytes minus torch.cuda.memory_reserved after each step (nothing else runs on the GPU)."""
    import torch
    import torch.nn.functional as F
    rows = []

    def mark(what):
        torch.cuda.synchronize()
        rows.append(dict(after=what, nvml_used=nvml_used(), reserved=torch.cuda.memory_reserved(),
                         outside=nvml_used() - torch.cuda.memory_reserved()))
    rows.append(dict(after="nothing (before CUDA)", nvml_used=nvml_used(), reserved=0, outside=nvml_used()))
    torch.cuda.init()
    x = torch.ones(1, device="cuda")
    mark("CUDA context and a first tensor")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    (a @ a).sum().backward()
    mark("bf16 matmul forward and backward (cuBLAS/cuBLASLt)")
    q = torch.randn(2, 16, 2048, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
    mark("sdpa flash forward and backward")
    w = torch.nn.Parameter(torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16))
    w.grad = torch.randn_like(w)
    torch.optim.AdamW([w], fused=True).step()
    mark("fused AdamW step")
    y = F.cross_entropy(torch.randn(4096, 32000, device="cuda", requires_grad=True),
                        torch.randint(0, 32000, (4096,), device="cuda"))
    y.backward()
    x = torch.randn(4096, 4096, device="cuda")
    (F.silu(x) * x).float().pow(2).mean().item()
    mark("cross entropy, silu, reductions")
    return rows


def peft_targets(out):
    """What PEFT's all-linear adapts in each one-layer MoE model (tests/data/groundtruth/configs)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM
    rows = []
    for name in ("qwen3-30b-a3b-1l.json", "mixtral-8x7b-1l.json", "moonlight-16b-1l-moe.json", "gpt-oss-20b-1l.json"):
        cfg = AutoConfig.from_pretrained("tests/data/groundtruth/configs/" + name)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
        adapted = sorted({n.split(".lora_A")[0].split("layers.0.")[-1] for n, _ in model.named_parameters() if ".lora_A" in n})
        rows.append(dict(config=name, trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
                         total=sum(p.numel() for p in model.parameters()), adapted=adapted))
        del model
        torch.cuda.empty_cache()
    with open(out, "a") as f:
        f.write(json.dumps(dict(id="peft-targets", rows=rows)) + "\n")


def main():
    argv = sys.argv[1:]
    if argv and argv[0] == "--snapshot":  # --snapshot ID OUT.jsonl SNAPSHOT.json
        c = dict(next(c for c in CASES if c["id"] == argv[1]), snapshot=argv[3])
        with open(argv[2], "a") as f:
            f.write(json.dumps(run_case(c)) + "\n")
        return
    if argv and argv[0] == "--peft-targets":
        peft_targets(argv[1])
        return
    if argv and argv[0] == "--extra2":
        out = argv[1]
        subprocess.run([sys.executable, __file__, "--peft-targets", out], timeout=150, check=False)
        for c in CASES:
            if c["id"] in EXTRA2:
                subprocess.run([sys.executable, __file__, "--case", c["id"], out], timeout=150, check=False)
        return
    if argv and argv[0] == "--context":
        with open(argv[1], "a") as f:
            f.write(json.dumps(dict(id="context-probe", rows=context_probe())) + "\n")
        return
    if argv and argv[0] == "--extra":
        out = argv[1]
        subprocess.run([sys.executable, __file__, "--context", out], timeout=120, check=False)
        for c in CASES:
            if c["id"] not in EXTRA:
                continue
            env = dict(os.environ)
            if c.get("alloc_conf"):
                env["PYTORCH_CUDA_ALLOC_CONF"] = c["alloc_conf"]
            subprocess.run([sys.executable, __file__, "--case", c["id"], out], timeout=150, check=False, env=env)
        return
    if argv and argv[0] == "--case":
        c = next(c for c in CASES if c["id"] == argv[1])
        try:
            r = run_case(c)
        except Exception as e:
            import traceback
            r = dict(id=c["id"], ok=False, error=repr(e)[:2000], trace=traceback.format_exc()[-3000:])
        with open(argv[2], "a") as f:
            f.write(json.dumps(r) + "\n")
        return
    out = argv[0]
    for c in CASES:
        t = time.time()
        env = dict(os.environ)
        if c.get("alloc_conf"):
            env["PYTORCH_CUDA_ALLOC_CONF"] = c["alloc_conf"]
        try:
            subprocess.run([sys.executable, __file__, "--case", c["id"], out], timeout=150, check=False, env=env)
        except subprocess.TimeoutExpired:
            with open(out, "a") as f:
                f.write(json.dumps(dict(id=c["id"], ok=False, error="timeout 150 s")) + "\n")
        print(f"{c['id']}: {time.time() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
