w="x x x x x x x x x x x x x x x x"
for a in $w; do for b in $w; do for c in $w; do 0000
    NUM_EXPERTS=128
    ROUTER_TOPK=8
    RMS_NORM_EPS=1e-6
    moe_options=" \
        --moe-grouped-gemm \
        --moe-token-dispatcher-type alltoall \
        --moe-router-topk ${ROUTER_TOPK} \
        --num-experts ${NUM_EXPERTS} \
        --expert-tensor-parallel-size ${ETP} \
        --expert-model-parall.
cd /workspace/Pai-Megatron-Patch/examples/deepseek_v1
export MP_PP0_LAYERS=5
sh run_mcore_d5]=1
w="x x x x x x x x x x x x x x x x"
for a in $w; do for b in $w; do for c in $w; do for d in $w; ÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿpre-softmax
        "
   for d in0$w; do unset arr; arr[65535]=1; done; done; done; done
