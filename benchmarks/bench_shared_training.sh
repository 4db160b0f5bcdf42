#!/usr/bin/env bash
# Training beside other jobs: the same 3-epoch demo run (experiment=demo, seed 1) with threads=0 (the free cores,
# the default), threads=1 and threads=2 (torch's default on 2 cores, what training did before `threads`), each
# REPEATS times, alternating; prints each run's training seconds (metrics.json's train_seconds) and the medians.
# Run it once with other jobs on the cores and once on a quiet machine (docs/results/performance.md, "Training beside
# other jobs"):   bash benchmarks/bench_shared_training.sh [REPEATS]
set -euo pipefail
REPEATS=${1:-3}
PY=${PYTHON:-.venv/bin/python}
OUT=$(mktemp -d)
for r in $(seq 1 "$REPEATS"); do
  for t in 0 1 2; do
    "$PY" -m matching.train experiment=demo trainer.max_epochs=3 threads=$t "hydra.run.dir=$OUT/t$t-r$r" \
      callbacks.epoch_line=null > /dev/null 2>&1
    printf 'threads=%s round %s: %s s\n' "$t" "$r" \
      "$("$PY" -c "import json,sys; print(round(json.load(open(sys.argv[1]))['train_seconds'], 2))" "$OUT/t$t-r$r/metrics.json")"
  done
done | tee "$OUT/times.txt"
"$PY" - "$OUT/times.txt" <<'PYEOF'
import re, statistics, sys
times = {}
for line in open(sys.argv[1]):
    t, s = re.match(r"threads=(\d+) round \d+: ([\d.]+) s", line).groups()
    times.setdefault(t, []).append(float(s))
print("median training seconds: " + ", ".join(f"threads={t} {statistics.median(v):.2f}" for t, v in sorted(times.items())))
PYEOF
