#!/bin/bash
# moemem test fixture: the continued-pretraining command of Pai-Megatron-Patch's Qwen3 README,
# https://github.com/alibaba/Pai-Megatron-Patch/blob/2c3e3c98fd880a9c3c5f1d28c7f6eb4527d57e51/examples/qwen3/README.md
# (Qwen3-30B-A3B on one dlc node: micro-batch 1, global batch 8, sequence 128, bf16, TP4 PP2 CP1
# ETP1 EP4, SP, distributed optimizer, flash attention, pretraining, selective recomputation).
cd /workspace/Pai-Megatron-Patch/examples/qwen3
sh run_mcore_qwen3.sh  \
dlc  \
A3B   \
1    \
8 \
1e-5   \
1e-6   \
128  \
128  \
bf16  \
4   \
2  \
1 \
1 \
4 \
true \
true   \
true \
false \
sel   \
false \
100000  \
/mnt/qwen-datasets/mmap_qwen3_datasets_text_document   \
/mnt/qwen-datasets/mmap_qwen3_datasets_text_document   \
/mnt/qwen-ckpts/Qwen3-30B-A3B-to-mcore  \
10000  \
100   \
/mnt/logs/output_mcore_qwen3_pretrain
