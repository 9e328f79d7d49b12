#!/usr/bin/env bash
# One device-tool call that spends its whole time: optionally the GPU suite, the demo and the launch benchmark
# (CHECKS=1; LAUNCH=1 for the launch benchmark; NUMBA=1 for the framework tests under an older numpy), then the regression-gate study until DEADLINE_S seconds after the start (schedule SCHEDULE:
# mixed, aa or slow; phase PHASE: against or stored). Logs and results under $OUT.
# Wheels the image lacks (pytest-xdist, execnet) are installed from .whl/ when it was carried; cupti-python (one wheel
# per Python version) and nvidia-cuda-cupti from there too where present (the unified-memory counters; COUNTERS=1
# runs benchmarks/counters_overhead.py).
set -o pipefail
start=$(date +%s)
OUT=${OUT:-/tmp/jetmem-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 JETMEM_CACHE_DIR=${JETMEM_CACHE_DIR:-/tmp/jetmem-cache}
if compgen -G ".whl/*.whl" >/dev/null; then
  mapfile -t plain < <(ls .whl/*.whl | grep -v -e /cupti_python- -e /nvidia_cuda_cupti-)
  if (( ${#plain[@]} )); then python3 -m pip install -q --no-deps "${plain[@]}" 2>&1 | tail -2; fi
  if compgen -G ".whl/cupti_python-*.whl" >/dev/null; then  # pip picks the wheel of this Python
    python3 -m pip install -q --no-deps --no-index --find-links .whl cupti-python nvidia-cuda-cupti 2>&1 | tail -2
  fi
fi
python3 -m pip install --no-deps --no-build-isolation -q . 2>&1 | grep -v -i warning | tail -3
if [[ -d .venv/lib/python3.11/site-packages/nvidia/cu13/include ]]; then
  export CUDA_HOME=$PWD/.venv/lib/python3.11/site-packages/nvidia/cu13  # the header wheel, carried
fi
if [[ ${CHECKS:-0} == 1 ]]; then
  JETMEM_INSTALLED=1 bash benchmarks/gpu_run.sh tests/gpu >/dev/null 2>&1
  tail -5 "$OUT/pytest.log"
  pytest-jetmem-demo > "$OUT/demo.log" 2>&1; tail -2 "$OUT/demo.log"
fi
if [[ ${LAUNCH:-0} == 1 ]]; then
  python3 benchmarks/bench_launch.py --json "$OUT/launch.json" > "$OUT/launch.log" 2>&1; tail -12 "$OUT/launch.log"
fi
if [[ ${COUNTERS:-0} == 1 ]]; then
  python3 benchmarks/counters_overhead.py --runs "${COUNTER_RUNS:-8}" --json "$OUT/counters_overhead.json" \
    > "$OUT/counters_overhead.log" 2>&1; tail -12 "$OUT/counters_overhead.log"
fi
if [[ ${NUMBA:-0} == 1 ]] && compgen -G ".whl-numpy24/numpy-*.whl" >/dev/null; then
  # The image's numba does not work with its numpy: the Numba test again with an older numpy shadowing it
  # (carried: .whl-numpy24, from pip download --python-version 3.12 numpy==2.4.6). Without CUDA_HOME: numba-cuda
  # looks for libdevice there, and the carried header wheel has none.
  python3 -m pip install -q --no-deps --target /tmp/numpy-older .whl-numpy24/numpy-*.whl 2>&1 | tail -2
  env -u CUDA_HOME PYTHONPATH=/tmp/numpy-older python3 -m pytest -p no:cacheprovider -rA -W ignore::DeprecationWarning \
    tests/gpu/test_frameworks_gpu.py > "$OUT/numba.log" 2>&1; grep -E "numba|passed|failed" "$OUT/numba.log" | tail -6
fi
left=$(( ${DEADLINE_S:-560} - ($(date +%s) - start) - 30 ))
echo "study budget: ${left}s"
if (( left > 40 )); then
  if [[ ${PHASE:-against} == all ]]; then  # both phases in one call: the wall-time ratio is taken side by side
    python3 benchmarks/gate_study.py --phase all --against-schedule "${SCHEDULE:-mixed}" \
      --fail "${FAIL:-2}" --budget-s $(( left / 2 )) --out "$OUT/gate" > "$OUT/gate.log" 2>&1
  else
    python3 benchmarks/gate_study.py --phase "${PHASE:-against}" --against-schedule "${SCHEDULE:-mixed}" \
      --fail "${FAIL:-2}" --budget-s "$left" --out "$OUT/gate" > "$OUT/gate.log" 2>&1
  fi
  tail -40 "$OUT/gate.log"
fi
# At most 8 files come back from a device call: everything in one archive, the study's summary beside it.
cp "$OUT/gate/gate_study.md" "$OUT/gate_study.md" 2>/dev/null
tar czf /tmp/jetmem-results.tgz -C "$OUT" . && mv /tmp/jetmem-results.tgz "$OUT/results.tgz"
find "$OUT" -mindepth 1 -maxdepth 1 -not -name results.tgz -not -name gate_study.md -exec rm -rf {} +
echo "total $(( $(date +%s) - start ))s"
