#!/usr/bin/env bash
# Does a longer sampling phase reach the posterior? SGLD with 4 chains (reSGLD's cold
# replica when, as on the paper grid, no swap is ever accepted) after the same 3000-epoch
# warm start, sampled for several lengths, each run in its own process. Meant for a GPU,
# where SGLD's step is a replayed CUDA graph (about 0.6 ms), so 10000 sampling epochs take
# minutes (on one H200 with 7 such runs at once, a pendulum run sampled 12,100 epochs in
# 530 s); copies each run's metrics and history to $OUT (default long-out/). A run cut by
# LIMIT leaves its history (energy and single-draw errors per epoch) but no metrics.
#   usage: bash benchmarks/long_sampling.sh [device, default cuda] [sampling epochs..., default 1000 4000 10000]
#   env: SCENARIOS="pendulum:0.05 pendulum:0.01 diffusion_reaction:0.1", LIMIT (s per run, 500)
set -u
OUT=${OUT:-long-out}
DEVICE=${1:-cuda}
shift || true
LENGTHS=${*:-1000 4000 10000}
SCENARIOS=${SCENARIOS:-pendulum:0.05 pendulum:0.01 diffusion_reaction:0.1}
BURN=${BURN:-3000}
LIMIT=${LIMIT:-500}
PY=${PY:-python3}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
mkdir -p "$OUT" /tmp/long
# the grid's data, as `reproduce` draws it (/tmp/long/data/PROBLEM-NOISE.npz)
$PY -c "
from pathlib import Path
from bdeeponet.experiments import ensure_data
ensure_data(Path('/tmp/long'), [(s.split(':')[0], float(s.split(':')[1])) for s in '$SCENARIOS'.split()])
" || exit 1
for sc in $SCENARIOS; do
  p=${sc%%:*} n=${sc##*:}
  data=$($PY -c "from pathlib import Path; from bdeeponet.grid import data_path; print(data_path(Path('/tmp/long'), '$p', $n))")
  for s in $LENGTHS; do
    run=/tmp/long/runs/$p-$n-sample$s
    rm -rf "$run"
    ( timeout "$LIMIT" $PY -m bdeeponet.cli train "$data" --out "$run" --method sgld \
        --chains 4 --epochs $((BURN + s)) --burn-in "$BURN" --device "$DEVICE" --quiet \
        > "$OUT/$p-$n-sample$s.log" 2>&1
      echo "rc $?" >> "$OUT/$p-$n-sample$s.log"
      for f in metrics.json history.csv timing.json; do
        [ -f "$run/$f" ] && cp "$run/$f" "$OUT/$p-$n-sample$s.$f"
      done ) &
  done
done
wait
$PY - "$OUT" <<'PYEOF'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.metrics.json"))):
    m = json.load(open(f))
    raw = m["coverage"]["raw"]["pointwise"]
    print(os.path.basename(f).removesuffix(".metrics.json"), f"e2 {m['e2']:.3f}",
          "raw", "/".join(f"{v:.1f}" for v in raw.values()), "rhat", m.get("convergence", {}).get("rhat"))
PYEOF
