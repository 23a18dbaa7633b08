#!/usr/bin/env bash
# One GPU-machine session in one command: build for sm_90, then the stages named in $@
# (smoke, test, sanitize, accuracy, tune, bench, ncu, ab), each writing its log under $OUT. Prints a
# short summary last. TESTS selects test files (default: all), BENCH_ARGS adds bench.py options,
# SANITIZERS and SANITIZE_PARTS the sanitize stage's tools and sanitize_cases.py parts (default: all).
# AB_REF names a second source tree (e.g. `git archive` of the base commit) that "ab" builds in
# place and benchmarks beside this one (AB_ARGS: bench.py options for both runs).
#   TESTS="tests/test_reduce.py" bash scripts/gpu_session.sh smoke test
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
python3 -c "import torch; print('torch', torch.__version__)" | tee -a "$OUT/device.txt"
if [ -n "${AB_REF:-}" ]; then  # the reference builds beside this tree's build
  (cd "$AB_REF" && MAX_JOBS=8 TORCH_CUDA_ARCH_LIST=9.0 python3 setup.py build_ext --inplace > "$OUT/ab_build.log" 2>&1) &
  ab_build=$!
fi
if ! MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 python3 -m pip install --no-build-isolation --no-deps -e . \
    > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; exit 1
fi
summary=()
# Peers' wheels (Liger-Kernel, FlagGems) travel in .whl/ when the call carries it.
install_peers() {
  if [ -z "${PEERS_INSTALLED:-}" ] && ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-} PEERS_INSTALLED=1
  fi
}
for stage in "$@"; do
  case "$stage" in
    smoke)
      python3 scripts/gpu_smoke.py > "$OUT/smoke.log" 2>&1
      summary+=("smoke rc=$?: $(tail -n +1 "$OUT/smoke.log" | grep -c '^BAD') bad")
      grep -v '^ok ' "$OUT/smoke.log" | tail -60 ;;
    test)
      # One pytest per file, so that a crash in one file cannot hide the others' results.
      : > "$OUT/pytest.log"
      for f in ${TESTS:-tests/test_*.py}; do
        timeout 300 python3 -m pytest "$f" -q -rfEs -p no:cacheprovider --durations=5 >> "$OUT/pytest.log" 2>&1
        summary+=("pytest $f rc=$?: $(tail -1 "$OUT/pytest.log")")
      done
      grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -40 ;;
    sanitize)
      # A part a run: the whole script under racecheck ran past 300 s (H200, session 82).
      for tool in ${SANITIZERS:-memcheck racecheck}; do
        for part in ${SANITIZE_PARTS:-reductions rows}; do
          PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 280 compute-sanitizer --tool $tool --error-exitcode 9 \
            python3 scripts/sanitize_cases.py $part > "$OUT/sanitize_${tool}_$part.log" 2>&1
          summary+=("sanitizer $tool $part rc=$?: $(grep -E '(ERROR|RACECHECK) SUMMARY' "$OUT/sanitize_${tool}_$part.log" | tail -1)")
        done
      done ;;
    accuracy)
      python3 scripts/accuracy_report.py --json "$OUT/accuracy.json" > "$OUT/accuracy.log" 2>&1
      summary+=("accuracy rc=$?")
      tail -60 "$OUT/accuracy.log" ;;
    tune)
      if [ -f scripts/tune_rows.py ]; then
        python3 scripts/tune_rows.py --json "$OUT/tune_rows.json" ${TUNE_ARGS:-} > "$OUT/tune_rows.log" 2>&1
        summary+=("tune_rows rc=$?")
        tail -70 "$OUT/tune_rows.log"
      fi ;;
    bench)
      install_peers
      python3 benchmarks/bench.py --json "$OUT/" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
      summary+=("bench rc=$?")
      tail -80 "$OUT/bench.log" ;;
    ncu)
      # Nsight Compute over NCU_CASES ("provider op shape dim dtype", ';'-separated: one call of
      # each, scripts/ncu_case.py), all reports in one file; torch.compile's generated code too.
      install_peers
      : > "$OUT/ncu.txt"; : > "$OUT/inductor_code.txt"
      IFS=';' read -ra cases <<< "${NCU_CASES:-}"
      for c in "${cases[@]}"; do
        echo "=== $c" >> "$OUT/ncu.txt"
        timeout 240 ncu --profile-from-start off --clock-control none ${NCU_ARGS:---section SpeedOfLight \
          --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
          --section MemoryWorkloadAnalysis} python3 scripts/ncu_case.py $c >> "$OUT/ncu.txt" 2>&1
        summary+=("ncu $c rc=$?")
        if [[ "$c" == torch.compile* ]]; then
          echo "=== $c" >> "$OUT/inductor_code.txt"
          TORCH_LOGS=output_code python3 scripts/ncu_case.py $c >> "$OUT/inductor_code.txt" 2>&1
        fi
      done ;;
    ab)
      if ! wait "$ab_build"; then tail -20 "$OUT/ab_build.log"; summary+=("ab: reference build failed"); continue; fi
      PYTHONPATH="$AB_REF/python" python3 -c "import reduce_ops; print('reference:', reduce_ops.__file__)"
      PYTHONPATH="$AB_REF/python" python3 benchmarks/bench.py --providers reduce_ops --json "$OUT/ab_ref.json" \
        ${AB_ARGS:-} > "$OUT/ab_ref.log" 2>&1
      python3 benchmarks/bench.py --providers reduce_ops,${AB_PEERS:-torch.compile} --json "$OUT/ab_new.json" \
        ${AB_ARGS:-} > "$OUT/ab_new.log" 2>&1
      python3 benchmarks/compare.py "$OUT/ab_ref.json" "$OUT/ab_new.json" --peer ${AB_PEERS:-torch.compile} \
        | tee "$OUT/ab.txt" | tail -150
      summary+=("ab rc=$?") ;;
  esac
done
printf '%s\n' "${summary[@]}"
