# moemem test fixture, written after NVIDIA Megatron-MoE-ModelZoo's
# best_practice/deepseek-v3/run_deepseek_v3_h100.sh (https://github.com/yanring/Megatron-MoE-ModelZoo,
# commit e865051): its "256 H100, 4k sequence length" run, DeepSeek-V3 at TP1 PP8 VPP4 EP32 with
# FP8 and the optimizer offloaded to the host. Run from the ModelZoo's root, as published.
export CLUSTER=
export CONTAINER_IMAGE=
export MEGATRON_PATH=
export MCORE_RELEASE_VERSION=
export GB200_CLUSTER=0

export MODEL=DeepSeek-V3
export WANDB_PROJECT=
export RUN_NAME="${MODEL}-benchmarking"
export BINDPCIE_PATH=${BINDPCIE_PATH:-""}

export PROFILE=0
export PRETRAIN=0
export MBS=1
export SEQ_LEN=4096
export MOE_GROUPED_GEMM=true
export RUN_TIME=00:30:00
export COMMENT=

OPTIMIZER_OFFLOAD=1 A2A_OVERLAP=0 MODEL=DeepSeek-V3 PP=8 VPP=4 TP=1 EP=32 CP=1 NNODES=32 GBS=8192 PR=fp8 bash sbatch_benchmarking.sh --recompute-granularity selective --recompute-modules mla_up_proj moe mlp layernorm --pipeline-model-parallel-layout "Et*2|(tt|)*22t|(tt|)*7mL" --mtp-num-layers 1 --mtp-loss-scaling-factor 0.1
