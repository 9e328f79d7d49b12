#!/usr/bin/env bash
# One device-tool call: install the package, run the whole test suite (GPU tests included) and the
# benchmarks, logs under $OUT. Usage on the GPU machine: bash benchmarks/gpu_run.sh [pytest args]
set -o pipefail
OUT=${OUT:-/tmp/jetmem-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 JETMEM_CACHE_DIR=/tmp/jetmem-cache
python3 -m pip install --no-deps --no-build-isolation -q . 2>&1 | grep -v -i warning | tail -3
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.free,memory.total --format=csv
  python3 -c "import cuda.bindings, numpy, pytest; print('cuda-bindings', cuda.bindings.__version__, 'numpy', numpy.__version__, 'pytest', pytest.__version__)"
} 2>&1 | tee "$OUT/env.txt"
JETMEM_RESULTS="$OUT/gpu_results.json" python3 -m pytest -q -rs -p no:randomly -p no:cacheprovider \
  --junitxml="$OUT/junit.xml" "${@:-tests}" 2>&1 | tee "$OUT/pytest.log"
