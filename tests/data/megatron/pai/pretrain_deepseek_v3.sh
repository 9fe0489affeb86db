#!/bin/bash
# moemem test fixture: the continued-pretraining command of Pai-Megatron-Patch's DeepSeek-V3
# README, https://github.com/alibaba/Pai-Megatron-Patch/blob/164f3775378faf666cfdc52f6e5fa9577212145c/examples/deepseek_v3/README.md
# (A37B: micro-batch 1, global batch 8, sequence 1024, bf16, TP8 PP8 CP1 ETP1 EP16, SP, distributed
# optimizer, selective recomputation, optimizer offload 1.0, 5 layers on the first stage).
cd /workspace/Pai-Megatron-Patch/examples/deepseek_v3
export MP_PP0_LAYERS=5
sh run_mcore_deepseek.sh  \
dsw  \
A37B   \
1    \
8 \
1e-5   \
1e-6   \
1024  \
1024  \
bf16  \
8   \
8  \
1 \
1 \
16 \
true \
true   \
false \
false \
sel   \
1.0 \
100000  \
/mnt/deepseek-datasets/mmap_deepseekv3_datasets_text_document   \
/mnt/deepseek-datasets/mmap_deepseekv3_datasets_text_document   \
/mnt/deepseek-ckpts/DeepSeek-V3-to-mcore-tp8-pp8-etp1-ep16  \
1000000000  \
10000   \
/workspace/output_mcore_deepseek_pretrain
