#!/usr/bin/env python3
"""Generates the regression corpus's command lines (fixed seed).

REGRESSION FIXTURE for the one-scenario refactor (issue 11): the cases are random but fixed
(seed 11) combinations of models x layouts x schedules x recomputation x precision x profiles,
run through analyze, explain, paper, count and search. tests/regression/snapshot.sh records what
the pre-refactor binary printed for each; test_regression.cpp asserts the current code prints the
same bytes. Regenerate the snapshot only for an intended change of output, and say so in the commit.

Usage: make_cases.py > tests/data/regression/cases.jsonl
"""
import json
import random

rng = random.Random(11)

MOE = ["deepseek-v3", "deepseek-v2-lite", "deepseek-v2", "mixtral-8x7b", "qwen3-30b-a3b", "moonlight-16b",
       "deepseek-moe-16b", "qwen2-57b-a14b"]
DENSE = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "mistral-7b", "qwen2-7b"]
CONFIGS = ["tests/data/configs/llama-3.1-8b.config.json", "tests/data/configs/moonlight-16b.config.json",
           "tests/data/configs/mixtral-8x22b.config.json"]
SCHEDULES = ["1f1b", "interleaved", "dualpipe", "dualpipev", "gpipe", "zb-h1"]
MODULES = ["core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe", "shared_experts"]
EXPERTS = {"deepseek-v3": 256, "deepseek-v2-lite": 64, "deepseek-v2": 160, "mixtral-8x7b": 8, "qwen3-30b-a3b": 128,
           "moonlight-16b": 64, "deepseek-moe-16b": 64, "qwen2-57b-a14b": 64,
           "tests/data/configs/moonlight-16b.config.json": 64, "tests/data/configs/mixtral-8x22b.config.json": 8}


def layout_args(model, moe):
    a = []
    tp = rng.choice([1, 1, 2, 4, 8])
    pp = rng.choice([1, 2, 4, 8, 16])
    dp = rng.choice([1, 2, 4, 8, 16, 32])
    cp = rng.choice([1, 1, 1, 2])
    schedule = rng.choice(SCHEDULES) if pp > 1 else "1f1b"
    a += ["--tp", str(tp), "--pp", str(pp), "--dp", str(dp)]
    if cp > 1:
        a += ["--cp", str(cp)]
    if tp > 1 and rng.random() < 0.7:
        a += ["--sp"]
    if moe:
        e = EXPERTS.get(model, 8)
        etp = rng.choice([1, tp]) if rng.random() < 0.3 else None
        ranks = tp * cp * dp
        ep = rng.choice([d for d in [1, 2, 4, 8, 16, 32, 64] if e % d == 0 and ranks % (d * (etp or 1)) == 0])
        a += ["--ep", str(ep)]
        if etp is not None:
            a += ["--etp", str(etp)]
    if schedule != "1f1b":
        a += ["--schedule", schedule]
    if schedule == "interleaved":
        a += ["--vpp", str(rng.choice([2, 4]))]
    if pp > 1 and schedule in ("1f1b", "zb-h1") and rng.random() < 0.15:
        a += ["--decoder-first-pipeline-num-layers", str(rng.choice([1, 2, 3]))]
    return a, pp, schedule


def training_args(profile, moe, model, schedule):
    a = []
    a += ["--micro-batch", str(rng.choice([1, 1, 2, 4]))]
    a += ["--seq-len", str(rng.choice([1024, 2048, 4096, 8192]))]
    r = rng.random()
    if profile == "paper":
        if r < 0.5:
            a += ["--recompute", "full"]
    elif r < 0.3:
        a += ["--recompute", "full"]
        if rng.random() < 0.5:
            a += ["--recompute-method", rng.choice(["uniform", "block"]), "--recompute-num-layers",
                  str(rng.choice([1, 2, 3]))]
    elif r < 0.65:
        a += ["--recompute", "selective"]
        if rng.random() < 0.7 and profile == "megatron":
            mods = rng.sample(MODULES, rng.choice([1, 2, 3]))
            a += ["--recompute-modules", ",".join(mods)]
    if profile != "torchtitan":
        z = rng.choice([0, 1, 1, 2, 3])
        if z:
            a += ["--zero", str(z)]
    if schedule == "gpipe" or rng.random() < 0.4:
        a += ["--global-batch", str(rng.choice([64, 256, 1024, 4096]))]
    if profile == "megatron" and rng.random() < 0.3:
        a += ["--fp8", rng.choice(["tensorwise", "delayed", "blockwise", "mxfp8"])]
    if profile == "megatron" and moe and rng.random() < 0.25:
        a += ["--moe-imbalance", rng.choice(["1.25", "1.5", "2"])]
    if profile == "megatron" and moe and rng.random() < 0.15:
        a += ["--moe-token-dispatcher", "deepep"]
    if profile == "megatron" and moe and rng.random() < 0.1:
        a += ["--moe-capacity-factor", "1.25"]
    if profile == "megatron" and "deepseek" in model and rng.random() < 0.2:
        a += ["--recipe", "deepseek-v3"]
    if rng.random() < 0.2:
        a += ["--overhead", rng.choice(["none", "low", "high"])]
    if rng.random() < 0.15:
        a += ["--attention", rng.choice(["flash", "eager"] if profile != "paper" else ["eager"])]
    if rng.random() < 0.1:
        a += ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    if rng.random() < 0.1:
        a += ["--logits-dtype", "bf16"]
    if profile == "torchtitan":
        if rng.random() < 0.4:
            a += ["--compile"]
        if rng.random() < 0.3:
            a += ["--loss", rng.choice(["upcast", "fused", "chunked"])]
        if rng.random() < 0.3:
            a += ["--reshard-after-forward", rng.choice(["default", "always", "never"])]
        if rng.random() < 0.2:
            a += ["--fp8", "tensorwise", "--fsdp-float8-all-gather"]
    if rng.random() < 0.3:
        a += ["--gpu", rng.choice(["h100-80g", "h800-80g", "h200-141g", "a100-80g", "b200-192g"])]
    return a


def main():
    cases = []

    def add(args):
        cases.append({"id": f"c{len(cases):04d}", "args": args})

    for i in range(260):
        profile = rng.choice(["megatron", "megatron", "megatron", "paper", "torchtitan"])
        if profile == "torchtitan":
            model = rng.choice(DENSE + ["tests/data/configs/llama-3.1-8b.config.json"])
        else:
            model = rng.choice(MOE + DENSE + CONFIGS)
        moe = model in EXPERTS
        layout, pp, schedule = layout_args(model, moe)
        base = ["--model", model, "--profile", profile] + layout + training_args(profile, moe, model, schedule)
        if profile == "paper" or rng.random() < 0.5:
            base += ["--mtp", str(rng.choice([0, 1]))] if "deepseek-v3" in model else []
        fmt = "json" if rng.random() < 0.8 else rng.choice(["table", "csv", "markdown"])
        add(["analyze"] + base + ["--format", fmt])
        stage = rng.choice([0, pp - 1, rng.randrange(pp)]) if rng.random() < 0.95 else pp
        add(["explain"] + base + ["--stage", str(stage), "--format", "json" if rng.random() < 0.85 else "table"])
    for model in MOE + DENSE:
        for by in ["module", "layer", "tensor"]:
            add(["count", "--model", model, "--by", by, "--format", "json"])
    for i in range(24):
        a = ["paper", "--format", "json" if i % 3 else "table"]
        if i % 4 == 1:
            a += ["--seq-len", str(rng.choice([2048, 8192]))]
        if i % 4 == 2:
            a += ["--stage", str(rng.choice([0, 5, 15]))]
        if i % 6 == 3:
            a += ["--model", rng.choice(["deepseek-v2", "deepseek-v2-lite"]), "--pp", "4", "--ep", "4", "--dp", "8"]
        add(a)
    searches = [
        ["--model", "deepseek-v3", "--gpus", "2048", "--gpu", "h800-80g", "--global-batch", "15360", "--seq-len", "4096"],
        ["--model", "deepseek-v3", "--gpus", "1024", "--gpu", "h100-80g", "--global-batch", "4096", "--recipe",
         "deepseek-v3"],
        ["--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "h100-80g", "--global-batch", "512"],
        ["--model", "llama-3.1-70b", "--gpus", "128", "--gpu", "a100-80g", "--global-batch", "1024"],
        ["--model", "llama-3.1-8b", "--gpus", "16", "--gpu", "h100-80g", "--global-batch", "256", "--profile",
         "torchtitan"],
        ["--model", "qwen3-30b-a3b", "--gpus", "32", "--gpu", "h200-141g", "--global-batch", "512", "--fp8",
         "blockwise"],
        ["--model", "deepseek-v2-lite", "--gpus", "16", "--gpu-memory", "40GiB", "--global-batch", "256",
         "--recompute", "none,full"],
        ["--model", "llama-3.1-405b", "--gpus", "8", "--gpu", "h100-80g", "--global-batch", "64"],
        ["--model", "deepseek-v3", "--gpus", "256", "--gpu", "h100-80g", "--global-batch", "2048", "--paper"],
        ["--model", "deepseek-v3", "--gpus", "512", "--gpu", "h200-141g", "--global-batch", "2048", "--profile",
         "paper"],
    ]
    for s in searches:
        if "--paper" in s:
            continue
        for fmt in ["json", "jsonl", "table", "csv"]:
            add(["search"] + s + ["--top", "15", "--threads", "2", "--format", fmt])
    for c in cases:
        print(json.dumps(c))


main()
