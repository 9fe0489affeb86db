# moemem test fixture, written after NVIDIA Megatron-MoE-ModelZoo's
# best_practice/qwen3/run_h100_235b.sh (https://github.com/yanring/Megatron-MoE-ModelZoo, commit
# e865051): Qwen3-235B-A22B on 256 H100 at TP2 PP8 VPP4 EP32, DeepEP, A2A overlap, CUDA graphs.
# Run from the ModelZoo's root, as published.
export CONTAINER_IMAGE=${CONTAINER_IMAGE:-}
export ACCOUNT=${ACCOUNT:-}
export MEGATRON_PATH=${MEGATRON_PATH:-}
export PARTITION=${PARTITION:-}
export CONTAINER_MOUNTS=${CONTAINER_MOUNTS:-}
export CLUSTER=${CLUSTER:-}

export MODEL=${MODEL:-Qwen3-235B-A22B}
export RUN_NAME=${RUN_NAME:-"${MODEL}-benchmarking"}
export WANDB_PROJECT=${WANDB_PROJECT:-}
export OUTPUT_PATH=${OUTPUT_PATH:-}

export PROFILE=0
export PRETRAIN=0
export MBS=1
export SEQ_LEN=4096
export MOE_GROUPED_GEMM=true
export RUN_TIME=00:30:00
export COMMENT=baseline
export PR=${PR:-"bf16"}

PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True NCCL_GRAPH_REGISTER=0 DISPATCHER=deepep A2A_OVERLAP=1 TP=2 PP=8 VPP=4 EP=32 NNODES=32 GBS=2048 bash ./sbatch_benchmarking.sh --recompute-granularity selective --recompute-modules moe_act layernorm --moe-router-force-load-balancing --cuda-graph-impl transformer_engine --cuda-graph-scope moe_router moe_preprocess
