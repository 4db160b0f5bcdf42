#!/usr/bin/env bash
# One-shot GPU check (one H100): seconds per SNLI-sized epoch for each aligner, eager and compiled, and N runs
# sharing the GPU, through the project's own benchmarks (bench_epoch.py, bench_concurrent.py).
#
#     OUT=/some/dir bash benchmarks/gpu_check.sh                    # on the GPU machine, from the repository root
#     OUT=/tmp/gpucheck_out GPU_CHECK_DRY=1 PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh   # tiny, on a CPU
#
# Writes $OUT/gpu_check.log (everything), $OUT/epochs.csv (one row per aligner x eager/compiled),
# $OUT/concurrent.csv (one row per N) and, where nvidia-smi works, $OUT/gpu_samples.csv (utilisation and memory
# once a second, to line up with the step start times in the log).
#
# Time: every step has its own timeout, bounded by a global deadline (GPU_CHECK_BUDGET seconds from the start,
# default 450, the whole script well inside 8 minutes); a step that fails or times out is logged and the next one
# runs. Order (most wanted first, where time may run short): eager softmax and coda; compiled coda and softmax;
# concurrent N = 1, 4, 8 (its time kept for it while the earlier steps run); then eager conflict and
# softmax_conflict, then compiled conflict and softmax_conflict, in the time left (the log says what was skipped).
#
# Not a full epoch: a full SNLI epoch per configuration (~80 s eager, ~40 s + ~80 s of compilation compiled, on the
# last H100 figures of docs/performance.md) does not fit 8 minutes, so each run trains on a corpus of
# GPU_CHECK_PAIRS pairs (default 32,000; bench_epoch's --pairs: SNLI's shape, same generator) for 2 epochs and times the 2nd
# (steady state: compilation, CUDA graph capture and warm-up fall in the 1st); the SNLI-epoch figure is
# 550,152 / (that epoch's pairs/s). The 1st epoch's seconds are reported too (with compilation, when compiled).
# The concurrent runs: bench_concurrent as in docs/performance.md (one epoch each, warm-up included) on
# GPU_CHECK_CONC_PAIRS pairs (default 48,000, the docs used 100,000).
#
# Wheels: hydra-core, omegaconf, antlr4-python3-runtime and hydra-joblib-launcher travel in .whl/ (carry it) and are
# installed into /tmp/site; the package itself is used from the source tree (PYTHONPATH=$PWD).

set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
DRY=${GPU_CHECK_DRY:-0}
BUDGET=${GPU_CHECK_BUDGET:-450}
SITE=${GPU_CHECK_SITE:-/tmp/site}
SNLI_PAIRS=550152
if [ "$DRY" = 1 ]; then
    TRAINER=cpu
    PAIRS=${GPU_CHECK_PAIRS:-256}
    CONC_PAIRS=${GPU_CHECK_CONC_PAIRS:-320}
    JOBS=${GPU_CHECK_JOBS:-1,2}
    CAP_EAGER=120 CAP_COMPILED=150 CAP_CONC=180 CONC_RESERVE=0 MIN_STEP=20 NEED_COMPILED=20
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
    # A CPU compile takes minutes: the dry run goes through the same overrides with torch.compile made a no-op.
    COMPILE_ENV=(env TORCH_COMPILE_DISABLE=1)
else
    TRAINER=gpu
    PAIRS=${GPU_CHECK_PAIRS:-32000}            # 500 steps of 64 an epoch
    CONC_PAIRS=${GPU_CHECK_CONC_PAIRS:-48000}  # longer epochs, so that the N runs' epochs overlap more
    JOBS=${GPU_CHECK_JOBS:-1,4,8}
    # Caps per step (s); CONC_RESERVE: seconds kept for the concurrent step while the steps before it run.
    # NEED_COMPILED: a compiled run is not started with less left (its compilation alone took ~80 s last time).
    CAP_EAGER=60 CAP_COMPILED=150 CAP_CONC=75 CONC_RESERVE=${GPU_CHECK_CONC_RESERVE:-120} MIN_STEP=20 NEED_COMPILED=90
    COMPILE_ENV=()
fi
ALIGNERS=${GPU_CHECK_ALIGNERS:-softmax,coda,conflict,softmax_conflict}
EAGER_FIRST=${GPU_CHECK_EAGER_FIRST:-softmax,coda}        # before the concurrent step; the other aligners after it
COMPILED_FIRST=${GPU_CHECK_COMPILED_FIRST:-coda,softmax}  # likewise
COMPILE_OVERRIDES=(compile=true compile_mode=reduce-overhead)
EPOCHS=2
export PYTHONUNBUFFERED=1
WORK=${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
LOG=$OUT/gpu_check.log
EPOCHS_CSV=$OUT/epochs.csv
CONC_CSV=$OUT/concurrent.csv
SAMPLER_PID=

log() { echo "[$(date +%T) +${SECONDS}s] $*"; }

# step NAME CAP RESERVE NEED CMD...: runs CMD under `timeout`, at most CAP seconds and never past DEADLINE - RESERVE
# (the time kept for the steps after it); skipped when less than NEED seconds (at least MIN_STEP) would be left.
# Sets STEP_RC (124/137: timed out; 200: skipped) and STEP_WALL.
step() {
    local name=$1 cap=$2 reserve=$3 need=$4
    shift 4
    ((need < MIN_STEP)) && need=$MIN_STEP
    local left=$((DEADLINE - SECONDS - reserve))
    local t=$((cap < left ? cap : left))
    STEP_WALL=0
    if ((t < need)); then
        log "### $name: SKIPPED, out of time (${t} s left for it, it needs ~${need} s; ${reserve} s kept for later steps)"
        STEP_RC=200
        return
    fi
    log "### $name: start, timeout ${t} s: $*"
    local t0=$SECONDS
    timeout -k 10 "$t" "$@"
    STEP_RC=$?
    STEP_WALL=$((SECONDS - t0))
    local note=""
    ((STEP_RC == 124 || STEP_RC == 137)) && note=" TIMED OUT"
    ((STEP_RC != 0 && STEP_RC != 124 && STEP_RC != 137)) && note=" FAILED"
    log "### $name: rc=$STEP_RC in ${STEP_WALL} s$note"
}

# epoch_row MODE ALIGNER RUN_DIR: one epochs.csv row from the run's metrics.json (empty figures if it has none).
epoch_row() {
    "$PYTHON" - "$EPOCHS_CSV" "$1" "$2" "$PAIRS" "$EPOCHS" "$3" "$STEP_RC" "$STEP_WALL" "$SNLI_PAIRS" <<'EOF'
import json, sys
from pathlib import Path
csv, mode, aligner, pairs, epochs, run, rc, wall, snli = sys.argv[1:]
pairs, epochs, snli = int(pairs), int(epochs), int(snli)
m = Path(run) / "metrics.json"
row = [mode, aligner, pairs, epochs, "", "", "", "", rc, wall]
if rc == "0" and m.exists():
    d = json.loads(m.read_text())
    last = d.get("seconds_last_epoch")
    med = d.get("seconds_per_epoch_median")
    if last:
        first = 2 * med - last if epochs == 2 and med is not None else ""  # the median of two is their mean
        row[4:8] = [f"{last:.3f}", f"{pairs / last:.0f}", f"{snli * last / pairs:.1f}", f"{first:.3f}" if first != "" else ""]
with open(csv, "a") as f:
    f.write(",".join(map(str, row)) + "\n")
print("RESULT " + " ".join(f"{k}={v}" for k, v in zip(
    ["mode", "aligner", "pairs", "epochs", "timed_epoch_s", "pairs_per_s", "snli_epoch_s", "first_epoch_s", "rc", "wall_s"], row)))
EOF
}

# conc_row N SWEEP_DIR: one concurrent.csv row from the sweep's metrics.json files.
conc_row() {
    "$PYTHON" - "$CONC_CSV" "$1" "$CONC_PAIRS" "$2" "$STEP_RC" "$STEP_WALL" <<'EOF'
import json, statistics, sys
from pathlib import Path
csv, n, pairs, sweep, rc, wall = sys.argv[1:]
n, pairs = int(n), int(pairs)
secs = [json.loads(p.read_text())["seconds_last_epoch"] for p in Path(sweep).rglob("metrics.json")] if Path(sweep).exists() else []
row = [n, pairs, len(secs), "", "", "", "", rc, wall]
if secs:
    med = statistics.median(secs)
    row[3:7] = [f"{med:.3f}", f"{min(secs):.3f}", f"{max(secs):.3f}", f"{n * pairs / med:.0f}"]
with open(csv, "a") as f:
    f.write(",".join(map(str, row)) + "\n")
print("RESULT " + " ".join(f"{k}={v}" for k, v in zip(
    ["N", "pairs", "runs_done", "median_epoch_s", "min_epoch_s", "max_epoch_s", "aggregate_pairs_per_s", "rc", "wall_s"], row)))
EOF
}

# The last lines of a run's own log, when its step did not succeed (bench_epoch prints stderr only on failure).
run_tail() {
    ((STEP_RC == 0 || STEP_RC == 200)) && return
    local f
    for f in "$@"; do
        [ -f "$f" ] && { echo "--- tail of $f"; tail -n 40 "$f"; }
    done
}

eager() {  # eager ALIGNER
    step "eager $1" "$CAP_EAGER" "$2" 0 "$PYTHON" benchmarks/bench_epoch.py --trainer "$TRAINER" --pairs "$PAIRS" \
        --epochs "$EPOCHS" --aligners "$1" --workdir "$WORK/eager"
    epoch_row eager "$1" "$WORK/eager/runs/snli-$1"
    run_tail "$WORK/eager/runs/snli-$1/train.log"
}

compiled() {  # compiled ALIGNER RESERVE
    step "compiled $1" "$CAP_COMPILED" "$2" "$NEED_COMPILED" "${COMPILE_ENV[@]}" "$PYTHON" benchmarks/bench_epoch.py \
        --trainer "$TRAINER" --pairs "$PAIRS" --epochs "$EPOCHS" --aligners "$1" --workdir "$WORK/compiled" \
        "${COMPILE_OVERRIDES[@]}"
    epoch_row compiled "$1" "$WORK/compiled/runs/snli-$1"
    # The next compiled run is started if about as much time is left as this one took (when it succeeded).
    ((STEP_RC == 0)) && NEED_COMPILED=$((STEP_WALL + 10))
    run_tail "$WORK/compiled/runs/snli-$1/train.log"
}

concurrent() {  # concurrent N RESERVE
    step "concurrent N=$1" "$CAP_CONC" "$2" 0 "$PYTHON" benchmarks/bench_concurrent.py --trainer "$TRAINER" \
        --jobs "$1" --pairs "$CONC_PAIRS" --workdir "$WORK/eager"
    conc_row "$1" "$WORK/eager/sweep-$1"
    ((STEP_RC == 0 || STEP_RC == 200)) || run_tail "$WORK"/eager/sweep-"$1"/*/train.log
}

summary() {
    log "### summary"
    "$PYTHON" - "$EPOCHS_CSV" "$CONC_CSV" <<'EOF'
import csv, sys
# The last H100 figures of docs/performance.md (full epochs; compiled: the 2nd epoch).
doc = {("eager", "softmax"): 78.4, ("eager", "coda"): 63.5, ("eager", "conflict"): 85.5,
       ("eager", "softmax_conflict"): 110.6, ("compiled", "softmax"): 41.8}
doc_conc = {1: 6785, 4: 27077, 8: 43648}
print("seconds per SNLI epoch (550,152 pairs), extrapolated from the timed epoch; compiled = compile=true "
      "compile_mode=reduce-overhead; docs = docs/performance.md's last H100 figures (full epochs)")
print(f"{'mode':<10} {'aligner':<17} {'timed s':>8} {'pairs/s':>8} {'SNLI s':>8} {'docs s':>7} {'1st ep s':>9} rc")
for r in csv.DictReader(open(sys.argv[1])):
    mode = r["mode"]
    d = doc.get((mode, r["aligner"]), "")
    print(f"{mode:<10} {r['aligner']:<17} {r['timed_epoch_s']:>8} {r['pairs_per_s']:>8} {r['snli_epoch_s']:>8} "
          f"{d!s:>7} {r['first_epoch_s']:>9} {r['rc']}")
rows = list(csv.DictReader(open(sys.argv[2])))
base = next((float(r["aggregate_pairs_per_s"]) for r in rows if r["N"] == "1" and r["aggregate_pairs_per_s"]), None)
print("concurrent runs (one epoch each, median over the N runs)")
print(f"{'N':>3} {'median s':>9} {'agg pairs/s':>12} {'vs N=1':>7} {'docs pairs/s':>13} rc")
for r in rows:
    agg = r["aggregate_pairs_per_s"]
    ratio = f"{float(agg) / base:.1f}x" if agg and base else ""
    print(f"{r['N']:>3} {r['median_epoch_s']:>9} {agg:>12} {ratio:>7} {doc_conc.get(int(r['N']), '')!s:>13} {r['rc']}")
EOF
}

main() {
    DEADLINE=$BUDGET
    log "gpu_check: dry=$DRY trainer=$TRAINER pairs=$PAIRS epochs=$EPOCHS (2nd timed) jobs=$JOBS aligners=$ALIGNERS"
    log "budget ${BUDGET} s; workdir $WORK; python $PYTHON; repo $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    git status --short 2>/dev/null | head -20

    # Wheels first, then the environment every step uses.
    if compgen -G ".whl/*.whl" >/dev/null; then
        ls -l .whl/
        step "install wheels" 90 0 0 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target "$SITE" .whl/*.whl
    else
        log "no .whl/ folder: hydra-core, omegaconf and the joblib launcher must already be importable"
    fi
    export PYTHONPATH=$SITE:$PWD
    if command -v nvidia-smi >/dev/null; then
        step "nvidia-smi" 30 0 0 nvidia-smi
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm --format=csv -l 1 \
            >"$OUT/gpu_samples.csv" 2>/dev/null &
        SAMPLER_PID=$!
        trap 'kill "$SAMPLER_PID" 2>/dev/null' EXIT
    else
        log "no nvidia-smi here"
    fi
    step "torch" 60 0 0 "$PYTHON" -c 'import torch; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device")'
    step "imports" 60 0 0 "$PYTHON" -c 'import sys, hydra, omegaconf, lightning, torch, matching.train
import hydra_plugins.hydra_joblib_launcher.joblib_launcher, joblib
print(sys.version.split()[0], "hydra", hydra.__version__, "omegaconf", omegaconf.__version__, "lightning",
      lightning.__version__, "joblib", joblib.__version__, "matching from", matching.train.__file__)'

    echo "mode,aligner,pairs,epochs,timed_epoch_s,pairs_per_s,snli_epoch_s,first_epoch_s,rc,wall_s" >"$EPOCHS_CSV"
    echo "N,pairs,runs_done,median_epoch_s,min_epoch_s,max_epoch_s,aggregate_pairs_per_s,rc,wall_s" >"$CONC_CSV"
    mkdir -p "$WORK/compiled"
    ln -sfn "$WORK/eager/data" "$WORK/compiled/data"   # one corpus (written by the first eager run)
    mkdir -p "$WORK/eager/data"

    # Order, most wanted first, so that what runs short of time is what matters least: the eager baseline of
    # softmax and CoDA; both compiled (CoDA's compiled epoch was never measured); the concurrent runs (their time
    # is kept for them while the runs before go); then the other aligners, eager and compiled, in the time left.
    local a n
    log "=== 1a. eager ${EAGER_FIRST}: ${PAIRS} pairs x ${EPOCHS} epochs each (the 2nd timed)"
    for a in ${EAGER_FIRST//,/ }; do
        eager "$a" "$((CONC_RESERVE + 100))"
    done
    log "=== 1b. compiled (${COMPILE_OVERRIDES[*]}) ${COMPILED_FIRST}: ${PAIRS} pairs x ${EPOCHS} epochs (the 2nd timed)"
    for a in ${COMPILED_FIRST//,/ }; do
        compiled "$a" "$CONC_RESERVE"
    done
    log "=== 2. concurrent runs sharing the device, N in ${JOBS}: ${CONC_PAIRS} pairs, one epoch each"
    for n in ${JOBS//,/ }; do
        concurrent "$n" 0
    done
    log "=== 1c. the other aligners in the time left, eager then compiled"
    for a in ${ALIGNERS//,/ }; do
        [[ ",$EAGER_FIRST," == *",$a,"* ]] || eager "$a" 0
    done
    for a in ${ALIGNERS//,/ }; do
        [[ ",$COMPILED_FIRST," == *",$a,"* ]] || compiled "$a" 0
    done

    [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null
    summary
    log "gpu_check: done in ${SECONDS} s; results in $OUT: $(cd "$OUT" && echo *)"
}

SECONDS=0
main 2>&1 | tee "$LOG"
