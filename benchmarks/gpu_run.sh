#!/usr/bin/env bash
# One device-tool call: install the package, run the whole test suite (GPU tests included) and the
# benchmarks, logs under $OUT. Usage on the GPU machine: bash benchmarks/gpu_run.sh [pytest args]
# PY picks the interpreter (default python3); JETMEM_INSTALLED=1 skips installing (gpu_run_cu12.sh does its own).
set -o pipefail
OUT=${OUT:-/tmp/jetmem-out}; mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONUNBUFFERED=1 JETMEM_CACHE_DIR=${JETMEM_CACHE_DIR:-/tmp/jetmem-cache}
if [[ -z ${JETMEM_INSTALLED:-} ]]; then
  $PY -m pip install --no-deps --no-build-isolation -q . 2>&1 | grep -v -i warning | tail -3
  if compgen -G ".whl/cupti_python-*.whl" >/dev/null; then  # the unified-memory counters, where carried
    $PY -m pip install -q --no-deps --no-index --find-links .whl cupti-python nvidia-cuda-cupti 2>&1 | tail -2
  fi
fi
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.free,memory.total --format=csv
  $PY -c "import cuda.bindings, numpy, pytest; print('cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__, 'pytest', pytest.__version__)"
  $PY -c "from cuda.bindings import nvrtc; e, a, b = nvrtc.nvrtcVersion(); print('NVRTC', a, b, e)"
  $PY -m pip list 2>/dev/null | grep -i -E "cuda|nvrtc|jetmem|cupti"
} 2>&1 | tee "$OUT/env.txt"
JETMEM_RESULTS="$OUT/gpu_results.json" $PY -m pytest -q -rs -p no:randomly -p no:cacheprovider \
  --junitxml="$OUT/junit.xml" "${@:-tests}" 2>&1 | tee "$OUT/pytest.log"
