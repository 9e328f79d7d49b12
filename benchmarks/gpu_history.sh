#!/usr/bin/env bash
# One device-tool call for the results store (issue "Every run remembered"): the GPU suite (with
# tests/gpu/test_history_gpu.py), then the demo again and again in fresh processes, each session stored in one
# SQLite store (A/A: the same code), until DEADLINE_S seconds after the start; then `pytest-jetmem history`
# over that store. Logs, results and the store under $OUT.
set -o pipefail
start=$(date +%s)
OUT=${OUT:-/tmp/jetmem-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 JETMEM_CACHE_DIR=${JETMEM_CACHE_DIR:-/tmp/jetmem-cache}
if compgen -G ".whl/*.whl" >/dev/null; then
  mapfile -t plain < <(ls .whl/*.whl | grep -v -e /cupti_python- -e /nvidia_cuda_cupti-)
  if (( ${#plain[@]} )); then python3 -m pip install -q --no-deps "${plain[@]}" 2>&1 | tail -2; fi
  if compgen -G ".whl/cupti_python-*.whl" >/dev/null; then
    python3 -m pip install -q --no-deps --no-index --find-links .whl cupti-python nvidia-cuda-cupti 2>&1 | tail -2
  fi
fi
python3 -m pip install --no-deps --no-build-isolation -q . 2>&1 | grep -v -i warning | tail -3
if [[ -d .venv/lib/python3.11/site-packages/nvidia/cu13/include ]]; then
  export CUDA_HOME=$PWD/.venv/lib/python3.11/site-packages/nvidia/cu13
fi
if [[ ${CHECKS:-1} == 1 ]]; then
  JETMEM_INSTALLED=1 bash benchmarks/gpu_run.sh ${SUITE:-tests/gpu} >/dev/null 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/pytest.log"; tail -2 "$OUT/pytest.log"
fi
store="$OUT/demo-history.sqlite"
i=0
while (( $(date +%s) - start < ${DEADLINE_S:-540} )); do
  i=$((i + 1))
  t0=$(date +%s.%N)
  JETMEM_STORE="$store" pytest-jetmem-demo > /tmp/demo-one.log 2>&1
  code=$?
  { echo "== demo $i"; cat /tmp/demo-one.log; } >> "$OUT/demo-all.log"  # one file: the tool returns few files
  echo "demo $i: exit $code in $(python3 -c "import time; print(round(time.time() - $t0, 2))") s: $(grep -o 'stored .*' /tmp/demo-one.log | head -1)"
done
pytest-jetmem history regressions --store "$store" > "$OUT/history-regressions.log" 2>&1; echo "regressions exit $?"
head -3 "$OUT/history-regressions.log"
pytest-jetmem history show "conv2d" --store "$store" > "$OUT/history-show.log" 2>&1; head -12 "$OUT/history-show.log"
