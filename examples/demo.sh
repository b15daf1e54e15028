#!/usr/bin/env bash
# make demo: run the example model under FlexTensor, on the GPU when one is present,
# else on the simulated device, and show what the shim did.
set -euo pipefail
BUILD=${BUILD:-build}
TRACE=$BUILD/demo-trace.bin
ARGS=(--layers 16 --dim 2048 --iters 12)
# 256 MiB of weights under a 128 MiB budget: discovery, profiling, the plan, then the
# streamed layers live in pinned host memory and are copied in ahead of use on a side
# stream; the exit report gives the measured step next to the predicted one.
export FT_GPU_MEM_LIMIT=${FT_GPU_MEM_LIMIT:-128MiB} FT_LOG_DIAGNOSTICS=${FT_LOG_DIAGNOSTICS:-1}
export FT_DISCOVERY_ITERS=${FT_DISCOVERY_ITERS:-2}

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 \
   && make -s gpu-example >/dev/null 2>&1; then
    where="the GPU"; MODEL=$BUILD/examples/model-gpu; SIM=()
else
    where="the simulated device (no GPU found)"; MODEL=$BUILD/examples/model-sim; SIM=(--sim)
fi

echo "== FlexTensor demo on $where"
echo "== the example model without FlexTensor"
if [ ${#SIM[@]} -gt 0 ]; then
    LD_LIBRARY_PATH=$BUILD/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$MODEL" "${ARGS[@]}" | tee $BUILD/demo-plain.txt
else
    "$MODEL" "${ARGS[@]}" | tee $BUILD/demo-plain.txt
fi
echo
echo "== the same model under ft-run: discovery, profiling and the plan (FT_LOG_LEVEL=info)"
FT_LOG_LEVEL=info $BUILD/bin/ft-run "${SIM[@]}" --trace "$TRACE" -- "$MODEL" "${ARGS[@]}" \
    | tee $BUILD/demo-shim.txt
echo
if [ "$(grep '^checksum' $BUILD/demo-plain.txt)" = "$(grep '^checksum' $BUILD/demo-shim.txt)" ]; then
    echo "== same checksum with and without FlexTensor: $(grep '^checksum' $BUILD/demo-shim.txt)"
else
    echo "== CHECKSUMS DIFFER" >&2
    exit 1
fi
echo
echo "== ft-trace $TRACE"
$BUILD/bin/ft-trace "$TRACE"
