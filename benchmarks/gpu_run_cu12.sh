#!/usr/bin/env bash
# One device-tool call under the CUDA 12 stack (JetPack 6's: cuda-bindings 12.x + NVRTC 12.x), in a
# clean virtual environment built only from wheels carried in $WHEELS (the GPU machine has no network;
# a venv that saw the image's site-packages could load its NVRTC 13 instead). Logs under $OUT.
# Here: mkdir .wheels12 && pip download -d .wheels12 "cuda-bindings==12.9.*" "nvidia-cuda-nvrtc-cu12==12.6.*" \
#       numpy pytest hypothesis pytest-benchmark pytest-xdist  (for the GPU machine's Python and platform)
# There: WHEELS=.wheels12 bash benchmarks/gpu_run_cu12.sh [pytest args]   (run with carry=[".wheels12"])
set -o pipefail
OUT=${OUT:-/tmp/jetmem-out}; mkdir -p "$OUT"
WHEELS=${WHEELS:-.wheels12}
export PYTHONUNBUFFERED=1 JETMEM_CACHE_DIR=/tmp/jetmem-cache-cu12 OUT
python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/jetmem-wheel . 2>&1 | grep -v -i warning | tail -3
python3 -m venv /tmp/cu12
/tmp/cu12/bin/pip install -q --no-index --find-links "$WHEELS" "$WHEELS"/*.whl /tmp/jetmem-wheel/pytest_jetmem-*.whl \
  2>&1 | tail -3
/tmp/cu12/bin/pytest-jetmem-demo 2>&1 | tee "$OUT/demo.log"
PY=/tmp/cu12/bin/python JETMEM_INSTALLED=1 bash "$(dirname "$0")/gpu_run.sh" "$@"
