#!/bin/bash
# moemem test fixture, written after NVIDIA Megatron-MoE-ModelZoo's launcher,
# https://github.com/yanring/Megatron-MoE-ModelZoo/blob/e865051/sbatch_benchmarking.sh:
# the same sourced configuration files, the recipe read with yq, and the same flags added on the
# same conditions. Only the SLURM submission differs: where the ModelZoo writes an sbatch script
# (a heredoc) whose srun runs ${TRAINING_CMD}, this runs the command under srun directly.
set -euxo pipefail

# The directory of this script
export WORKSPACE=$(dirname "$(readlink -f "$0")")

# What the caller must set
export MODEL=${MODEL:-"your_own_model"}
export CLUSTER=${CLUSTER:-"template"}
export MCORE_RELEASE_VERSION=${MCORE_RELEASE_VERSION:-"your_own_megatron_version"}
export MEGATRON_PATH=${MEGATRON_PATH:-"your_own_megatron_path"}
export CONTAINER_IMAGE=${CONTAINER_IMAGE:-"your_own_container_image"}

source "${WORKSPACE}/runtime_configs/benchmarking/common.conf"
source "${WORKSPACE}/runtime_configs/benchmarking/runtime.conf"
source "${WORKSPACE}/cluster_configs/benchmarking/${CLUSTER}.conf"

TRAINING_PARAMS=${TRAINING_PARAMS:-""}

# The recipe, with the variables above substituted
if [[ -f ${TRAINING_PARAMS_PATH} ]]; then
    envsubst < ${TRAINING_PARAMS_PATH} > ${TRAINING_PARAMS_PATH}.tmp
    TRAINING_PARAMS_PATH=${TRAINING_PARAMS_PATH}.tmp
else
    echo "no recipe at ${TRAINING_PARAMS_PATH}"
    exit 1
fi

# MODEL_ARGS as flags: true is a bare switch, false is left out
TRAINING_PARAMS_FROM_CONFIG=$(yq '... comments="" | .MODEL_ARGS | to_entries | .[] |
    select(.value != "false") |
    with(select(.value == "true"); .value = "") |
    [.key + " " + .value] | join("")' ${TRAINING_PARAMS_PATH} | tr '\n' ' ')
TRAINING_PARAMS="${TRAINING_PARAMS} ${TRAINING_PARAMS_FROM_CONFIG}"

# The caller's own flags come last
if [[ $# -gt 0 ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} $@"
fi

# Interleaving, unless the flags already describe it
if [[ ${VPP} -gt 1 ]]; then
    if [[ ! "${TRAINING_PARAMS}" =~ "--pipeline-model-parallel-layout" ]] && \
       [[ ! "${TRAINING_PARAMS}" =~ "--num-virtual-stages-per-pipeline-rank" ]] && \
       [[ ! "${TRAINING_PARAMS}" =~ "--num-layers-per-virtual-pipeline-stage" ]]; then
        TRAINING_PARAMS="${TRAINING_PARAMS} --num-virtual-stages-per-pipeline-rank ${VPP}"
    fi
fi

# Layers that do not divide by PP
if [[ $((NUM_LAYERS % PP)) -ne 0 ]]; then
    if [[ ! "${TRAINING_PARAMS}" =~ "--pipeline-model-parallel-layout" ]]; then
        TRAINING_PARAMS="${TRAINING_PARAMS} --decoder-first-pipeline-num-layers ${PP_FIRST} --decoder-last-pipeline-num-layers ${PP_LAST}"
    fi
fi

OPTIMIZER_OFFLOAD=${OPTIMIZER_OFFLOAD:-0}
if [[ ${OPTIMIZER_OFFLOAD} == 1 ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d"
fi

DISPATCHER=${DISPATCHER:-"deepep"}
if [[ ${DISPATCHER} == "alltoall" ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --moe-token-dispatcher-type alltoall"
elif [[ ${DISPATCHER} == "deepep" ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep"
elif [[ ${DISPATCHER} == "hybridep" ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend hybridep --moe-hybridep-num-sms 32"
fi

if [[ ${PR} == "fp8" ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --fp8-recipe blockwise --fp8-format e4m3"
    if [[ ${OPTIMIZER_OFFLOAD} == 0 ]]; then
        TRAINING_PARAMS="${TRAINING_PARAMS} --fp8-param-gather"
    fi
    TRAINING_PARAMS="${TRAINING_PARAMS} --use-precision-aware-optimizer --main-grads-dtype fp32 --main-params-dtype fp32 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
    TRAINING_PARAMS="${TRAINING_PARAMS} --moe-router-padding-for-fp8"
fi

if [[ ${PR} == "bf16" ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --tp-comm-overlap"
fi

if [[ ${PR} == "mxfp8" ]]; then
    TRAINING_PARAMS="${TRAINING_PARAMS} --fp8-recipe mxfp8 --fp8-format e4m3"
    if [[ ${OPTIMIZER_OFFLOAD} == 0 ]]; then
        TRAINING_PARAMS="${TRAINING_PARAMS} --fp8-param-gather --reuse-grad-buf-for-mxfp8-param-ag"
        TRAINING_PARAMS="${TRAINING_PARAMS} --overlap-grad-reduce --overlap-param-gather"
    fi
    TRAINING_PARAMS="${TRAINING_PARAMS} --use-precision-aware-optimizer --main-grads-dtype fp32 --main-params-dtype fp32 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"
    TRAINING_PARAMS="${TRAINING_PARAMS} --moe-router-padding-for-quantization"
fi

# Overlapping the expert all-to-all of two micro-batches
A2A_OVERLAP=${A2A_OVERLAP:-0}
if [[ ${A2A_OVERLAP} == 1 ]]; then
    export CUDA_DEVICE_MAX_CONNECTIONS=32
    TRAINING_PARAMS="${TRAINING_PARAMS} --delay-wgrad-compute --overlap-moe-expert-parallel-comm"
else
    export CUDA_DEVICE_MAX_CONNECTIONS=1
fi

# A sequence longer than the recipe's position table
MAX_POSITION_EMBEDDINGS_FROM_CONFIG=$(yq '.MODEL_ARGS."--max-position-embeddings"' ${TRAINING_PARAMS_PATH})
if [[ -n ${MAX_POSITION_EMBEDDINGS_FROM_CONFIG} ]] && [[ -n ${SEQ_LEN} ]]; then
    if [[ ${SEQ_LEN} -gt ${MAX_POSITION_EMBEDDINGS_FROM_CONFIG} ]]; then
        TRAINING_PARAMS="${TRAINING_PARAMS} --max-position-embeddings ${SEQ_LEN}"
    fi
fi

if [[ ${PROFILE} == "1" ]] || [[ ${PROFILE} == "nsys" ]]; then
    PROFILE_CMD="nsys profile --sample=none --cpuctxsw=none -t cuda,nvtx --capture-range=cudaProfilerApi -o ${OUTPUT_PATH}/nsys/${MODEL}"
    TRAINING_PARAMS="${TRAINING_PARAMS} --profile --profile-step-start 23 --profile-step-end 25 --profile-ranks 0 "
else
    PROFILE_CMD=""
fi

export BINDPCIE_PATH=${BINDPCIE_PATH:-""}
export TRAINING_CMD="${PROFILE_CMD} ${BINDPCIE_PATH} python ${TRAINING_SCRIPT_PATH} ${TRAINING_PARAMS}"

export GB200_CLUSTER=${GB200_CLUSTER:-0}
if [[ "${GB200_CLUSTER}" == "1" ]]; then
    N_TASKS_PER_NODE=4
else
    N_TASKS_PER_NODE=8
fi

srun --nodes=${NNODES} --ntasks-per-node=${N_TASKS_PER_NODE} --mpi=pmix -l \
    --container-image=${CONTAINER_IMAGE} --container-workdir=${MEGATRON_PATH} \
    ${TRAINING_CMD}
