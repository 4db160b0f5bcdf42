#!/usr/bin/env bash
# One-shot GPU check (one H100 or H200): seconds per SNLI-sized epoch for each aligner with the whole training step
# captured as CUDA graphs (capture=true) and eagerly, in one sitting; the step alone in a bare loop, eager against
# replayed (bench_replay.py: how close their weights are, and what the loop around the step costs); N runs sharing
# the GPU; then compilation inside the capture, in the time left.
#
#     OUT=/some/dir bash benchmarks/gpu_check.sh                    # on the GPU machine, from the repository root
#     OUT=/tmp/gpucheck_out GPU_CHECK_DRY=1 PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh   # tiny, on a CPU
#
# Writes $OUT/gpu_check.log (everything), $OUT/epochs.csv (one row per aligner x mode), $OUT/replay.txt (the bare
# loops), $OUT/concurrent.csv (one row per N) and, where nvidia-smi works, $OUT/gpu_samples.csv (utilisation and
# memory once a second, to line up with the step start times in the log).
#
# Time: every step has its own timeout, bounded by a global deadline (GPU_CHECK_BUDGET seconds from the start,
# default 450, the whole script well inside 8 minutes); a step that fails or times out is logged and the next one
# runs. Order (most wanted first, where time may run short): captured softmax and coda, then eager softmax and coda
# (the baseline, same sitting); the bare loops of all four aligners; captured conflict and softmax_conflict;
# concurrent captured runs N = 1, 4, 8; eager conflict and softmax_conflict; compiled + captured coda and softmax.
#
# Not a full epoch: each run trains on a corpus of GPU_CHECK_PAIRS pairs (default 32,000; bench_epoch's --pairs:
# SNLI's shape, same generator) for 2 epochs and times the 2nd (steady state: compilation, CUDA graph capture and
# warm-up fall in the 1st); the SNLI-epoch figure is 550,152 / (that epoch's pairs/s). The 1st epoch's seconds are
# reported too. The concurrent runs: bench_concurrent (one epoch each, warm-up included) on GPU_CHECK_CONC_PAIRS
# pairs (default 48,000).
#
# Wheels: hydra-core, omegaconf, antlr4-python3-runtime and hydra-joblib-launcher travel in .whl/ (carry it) and are
# installed into /tmp/site; the package itself is used from the source tree (PYTHONPATH=$PWD). Made once, where pip
# reaches the package index (antlr4 4.9.3 has no wheel on it: pip builds one):
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux2014_x86_64 -d .whl hydra-core==1.3.8 omegaconf==2.3.1 hydra-joblib-launcher==1.2.0
#     pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3

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
    CAP_EAGER=120 CAP_COMPILED=150 CAP_CONC=180 CAP_REPLAY=180 MIN_STEP=20 NEED_COMPILED=20
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
    # A CPU compile takes minutes: the dry run goes through the same overrides with torch.compile made a no-op.
    COMPILE_ENV=(env TORCH_COMPILE_DISABLE=1)
else
    TRAINER=gpu
    PAIRS=${GPU_CHECK_PAIRS:-32000}            # 500 steps of 64 an epoch
    CONC_PAIRS=${GPU_CHECK_CONC_PAIRS:-48000}  # longer epochs, so that the N runs' epochs overlap more
    JOBS=${GPU_CHECK_JOBS:-1,4,8}
    # Caps per step (s). NEED_COMPILED: a compiled run is not started with less left (its compilation alone took
    # ~40-80 s last time).
    CAP_EAGER=60 CAP_COMPILED=150 CAP_CONC=75 CAP_REPLAY=120 MIN_STEP=20 NEED_COMPILED=90
    COMPILE_ENV=()
fi
ALIGNERS=${GPU_CHECK_ALIGNERS:-softmax,coda,conflict,softmax_conflict}
FIRST=${GPU_CHECK_FIRST:-softmax,coda}   # captured and eager first; the other aligners later
CAPTURE_OVERRIDES=(capture=true)
COMPILE_OVERRIDES=(capture=true compile=true compile_mode=default)
EPOCHS=2
export PYTHONUNBUFFERED=1
WORK=${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
LOG=$OUT/gpu_check.log
EPOCHS_CSV=$OUT/epochs.csv
REPLAY_TXT=$OUT/replay.txt
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

run_mode() {  # run_mode MODE ALIGNER CAP NEED OVERRIDES...: one bench_epoch run, its epochs.csv row
    local mode=$1 aligner=$2 cap=$3 need=$4
    shift 4
    local env=()
    [ "$mode" = compiled ] && env=("${COMPILE_ENV[@]}")
    step "$mode $aligner" "$cap" 0 "$need" "${env[@]}" "$PYTHON" benchmarks/bench_epoch.py --trainer "$TRAINER" \
        --pairs "$PAIRS" --epochs "$EPOCHS" --aligners "$aligner" --workdir "$WORK/$mode" "$@"
    epoch_row "$mode" "$aligner" "$WORK/$mode/runs/snli-$aligner"
    run_tail "$WORK/$mode/runs/snli-$aligner/train.log"
    grep -h "capture=true:" "$WORK/$mode/runs/snli-$aligner/train.log" 2>/dev/null | tail -1
}

eager() { run_mode eager "$1" "$CAP_EAGER" 0; }
captured() { run_mode captured "$1" "$CAP_EAGER" 0 "${CAPTURE_OVERRIDES[@]}"; }
compiled() {
    run_mode compiled "$1" "$CAP_COMPILED" "$NEED_COMPILED" "${COMPILE_OVERRIDES[@]}"
    # The next compiled run is started if about as much time is left as this one took (when it succeeded).
    ((STEP_RC == 0)) && NEED_COMPILED=$((STEP_WALL + 10))
}

concurrent() {  # concurrent N
    step "concurrent N=$1" "$CAP_CONC" 0 0 "$PYTHON" benchmarks/bench_concurrent.py --trainer "$TRAINER" \
        --jobs "$1" --pairs "$CONC_PAIRS" --workdir "$WORK/captured" "${CAPTURE_OVERRIDES[@]}"
    conc_row "$1" "$WORK/captured/sweep-$1"
    ((STEP_RC == 0 || STEP_RC == 200)) || run_tail "$WORK"/captured/sweep-"$1"/*/train.log
}

bare_loops() {  # the step alone, eager against replayed, every aligner
    step "bare loops" "$CAP_REPLAY" 0 0 "$PYTHON" benchmarks/bench_replay.py --trainer "$TRAINER" --pairs "$PAIRS" \
        --rounds 3 --aligners "$ALIGNERS" --workdir "$WORK/replay"
}

summary() {
    log "### summary"
    "$PYTHON" - "$EPOCHS_CSV" "$CONC_CSV" <<'EOF'
import csv, sys
# The last H100 figures of docs/results/training-speed.md (2026-11-26, the same script's eager runs).
doc = {("eager", "softmax"): 86.3, ("eager", "coda"): 82.7, ("eager", "conflict"): 52.9,
       ("eager", "softmax_conflict"): 74.4}
doc_conc = {1: 10724, 4: 27930, 8: 55293}
print("seconds per SNLI epoch (550,152 pairs), extrapolated from the timed epoch; captured = capture=true; "
      "compiled = capture=true compile=true; docs = docs/results/training-speed.md's H100 figures of 2026-11-26 (eager)")
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
    mkdir -p "$WORK/eager/data" "$WORK/replay"
    local mode a n
    for mode in captured compiled; do   # one corpus (written by the first run)
        mkdir -p "$WORK/$mode"
        ln -sfn "$WORK/eager/data" "$WORK/$mode/data"
    done

    log "=== 1. captured then eager ${FIRST}: ${PAIRS} pairs x ${EPOCHS} epochs each (the 2nd timed)"
    for a in ${FIRST//,/ }; do captured "$a"; done
    for a in ${FIRST//,/ }; do eager "$a"; done
    log "=== 2. the step alone in a bare loop, eager against replayed: ${ALIGNERS}"
    bare_loops 2>&1 | tee "$REPLAY_TXT"
    log "=== 3. captured, the other aligners"
    for a in ${ALIGNERS//,/ }; do [[ ",$FIRST," == *",$a,"* ]] || captured "$a"; done
    log "=== 4. concurrent captured runs sharing the device, N in ${JOBS}: ${CONC_PAIRS} pairs, one epoch each"
    for n in ${JOBS//,/ }; do concurrent "$n"; done
    log "=== 5. eager, the other aligners; then compiled + captured ${FIRST}, in the time left"
    for a in ${ALIGNERS//,/ }; do [[ ",$FIRST," == *",$a,"* ]] || eager "$a"; done
    for a in ${FIRST//,/ }; do compiled "$a"; done

    [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null
    summary
    log "gpu_check: done in ${SECONDS} s; results in $OUT: $(cd "$OUT" && echo *)"
}

SECONDS=0
main 2>&1 | tee "$LOG"
