#!/usr/bin/env bash
# Everything GPU-side in one command on the GPU machine (one device call), in this order, each step
# bounded by its own limit and by what is left of TOTAL_LIMIT_S (570 s from the script's start: a
# device call is killed at 600 s), a step with under 30 s left skipped:
#   1. the shipped candidates and every shipped problem's reference as a candidate judged twice
#      (bench/gpu_repeat.py: the speedups' repeatability), REPEAT_LIMIT_S (220 s; 116 s on a warm
#      H100 with its builds cached, 172 s cold, 2026-12-07);
#   2. the GPU tests (pytest args, default -m gpu), TESTS_LIMIT_S (330 s; cold on an H100 they took
#      336 to 448 s, so a cold machine may not reach the last of them);
#   3. the first run's medians against triton.testing.do_bench's (bench/gpu_dobench.py), DOBENCH_LIMIT_S (120 s);
#   4. the shipped candidates judged with --memcheck, MEMCHECK_LIMIT_S (150 s).
# A limit of 0 skips its step. Run from the project root there, after ../shared/gpu/stage.sh here:
#
#     bash bench/gpu_verify.sh [PYTEST ARGS...]
#
# Writes into $OUT (or /tmp/gpu-verify): summary.txt, repeat.txt, verdicts.txt, results.jsonl (and the
# second run's, results2.jsonl), pytest.log, dobench.txt, memcheck.txt.
set -uo pipefail
started=$(date +%s)
out="${OUT:-/tmp/gpu-verify}"
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$out/summary.txt"

# The seconds a step may take: its own limit, or what is left of the total if less; 0 to skip it.
budget() {
    local left=$(( ${TOTAL_LIMIT_S:-570} - ($(date +%s) - started) ))
    local limit=$(( $1 < left ? $1 : left ))
    echo $(( limit >= 30 ? limit : 0 ))
}
note() { echo "$1 in $(( $(date +%s) - started )) s" | tee -a "$out/summary.txt"; }

repeat_rc=0
if [ "$(budget "${REPEAT_LIMIT_S:-220}")" -gt 0 ]; then
    timeout "$(budget "${REPEAT_LIMIT_S:-220}")" python3 bench/gpu_repeat.py /tmp/gpu-verify-repeat > "$out/repeat.log" 2>&1
    repeat_rc=$?
    note "two runs rc=$repeat_rc"
fi
cp /tmp/gpu-verify-repeat/repeat.txt "$out/" 2>/dev/null && cat "$out/repeat.txt" >> "$out/summary.txt"
first=/tmp/gpu-verify-repeat/run1/results.jsonl
cp /tmp/gpu-verify-repeat/run2/results.jsonl "$out/results2.jsonl" 2>/dev/null  # the second run's, to compare call by call
if [ -f "$first" ]; then
    cp "$first" "$out/results.jsonl"
    python3 - "$first" > "$out/verdicts.txt" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    speed = f"{r['speedup']:.3g}x" if r.get("speedup") else "-"
    print(f"{r['candidate']:55} {r['status']:14} {speed:>8} {','.join(r.get('flags') or [])}")
EOF
    grep -v "/reference.py" "$out/verdicts.txt" | tee -a "$out/summary.txt"
fi

tests_rc=0
if [ "$(budget "${TESTS_LIMIT_S:-330}")" -gt 0 ]; then
    # -v: each test's name and outcome as it ends, which a run killed at its limit still shows.
    timeout "$(budget "${TESTS_LIMIT_S:-330}")" python3 -m pytest ${@:--m gpu} -v --tb=short -rfE \
        -p no:cacheprovider --durations=15 > "$out/pytest.log" 2>&1
    tests_rc=$?
    note "pytest rc=$tests_rc: $(tail -n 1 "$out/pytest.log")"
fi

if [ -f "$first" ] && [ "$(budget "${DOBENCH_LIMIT_S:-120}")" -gt 0 ]; then
    timeout "$(budget "${DOBENCH_LIMIT_S:-120}")" python3 bench/gpu_dobench.py "$first" > "$out/dobench.txt" 2>&1
    note "do_bench rc=$?"
    tail -n 1 "$out/dobench.txt" | tee -a "$out/summary.txt"
fi

if [ "$(budget "${MEMCHECK_LIMIT_S:-150}")" -gt 0 ]; then
    timeout "$(budget "${MEMCHECK_LIMIT_S:-150}")" python3 -m harness eval candidates --problems problems --device cuda \
        --memcheck --trials 10 --out /tmp/gpu-verify-memcheck --db /tmp/gpu-verify-memcheck.db > "$out/memcheck.txt" 2>&1
    note "memcheck run rc=$?"
    python3 - /tmp/gpu-verify-memcheck/results.jsonl >> "$out/memcheck.txt" 2>&1 <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    passes = "; ".join(f"{p['tool']} {p['status']} {p['seconds']:.1f} s {p.get('report') or ''}" for p in r.get("sanitized") or [])
    print(f"{r['candidate']:50} {r['status']:14} {passes}")
EOF
    grep -E "^memcheck:" "$out/memcheck.txt" | tee -a "$out/summary.txt"
fi

exit $(( tests_rc || repeat_rc ))
