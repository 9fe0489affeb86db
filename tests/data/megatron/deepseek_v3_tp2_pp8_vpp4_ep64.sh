#!/bin/bash
# DeepSeek-V3 pre-training with Megatron-LM on 1,024 GPUs, written for moemem's tests after
# NVIDIA's published DeepSeek-V3 recipe: TP2 PP8 VPP4 EP64, the pipeline layout Et|(tt|)*30mL,
# one MTP depth, selective recomputation of the MLA up-projections and dense MLPs, the
# distributed and precision-aware optimizer (bf16 main grads and moments).
NNODES=${NNODES:-128}
GPUS_PER_NODE=8
TP=2
PP=8
EP=64

MODEL_ARGS=(
    --num-layers 61
    --hidden-size 7168
    --ffn-hidden-size 18432
    --num-attention-heads 128
    --multi-latent-attention
    --q-lora-rank 1536
    --kv-lora-rank 512
    --qk-head-dim 128
    --qk-pos-emb-head-dim 64
    --v-head-dim 128
    --rotary-scaling-factor 40
    --normalization RMSNorm
    --swiglu
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --position-embedding-type rope
    --vocab-size 129280
    --make-vocab-size-divisible-by 128
    --mtp-num-layers 1
    --mtp-loss-scaling-factor 0.1
)

MOE_ARGS=(
    --num-experts 256
    --moe-layer-freq "([0]*3+[1]*58)"
    --moe-ffn-hidden-size 2048
    --moe-shared-expert-intermediate-size 2048
    --moe-router-topk 8
    --moe-router-score-function sigmoid
    --moe-router-enable-expert-bias
    --moe-router-topk-scaling-factor 2.5
    --moe-router-load-balancing-type seq_aux_loss
    --moe-aux-loss-coeff 1e-4
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size ${TP}
    --pipeline-model-parallel-size ${PP}
    --num-virtual-stages-per-pipeline-rank 4
    --pipeline-model-parallel-layout "Et|(tt|)*30mL"
    --expert-model-parallel-size ${EP}
    --expert-tensor-parallel-size 1
    --context-parallel-size 1
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 8192
    --seq-length 4096
    --bf16
    --use-precision-aware-optimizer
    --main-grads-dtype bf16
    --exp-avg-dtype bf16
    --exp-avg-sq-dtype bf16
    --recompute-granularity selective
    --recompute-modules mla_up_proj mlp
    --lr 3.9e-6
    --attention-backend fused
)

torchrun --nproc-per-node ${GPUS_PER_NODE} --nnodes ${NNODES} pretrain_gpt.py \
    ${MODEL_ARGS[@]} ${MOE_ARGS[@]} ${PARALLEL_ARGS[@]} ${TRAINING_ARGS[@]}
