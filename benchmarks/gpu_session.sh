#!/usr/bin/env bash
# One prepared GPU session (a lent H100/H200 gives about 15 minutes in all). Parts, each
# with its own time limit and log under $OUT (default gpu-out/), so one that overruns costs
# only its own result:
#   tests   the GPU tests (tests/test_device.py, tests/samplers/test_graph.py)
#   chains  chains as a batch (benchmarks/chains_cost.py)
#   graph   the CUDA-graph step against the eager one (benchmarks/cuda_graph_probe.py)
#   loop    `bdeeponet train` (SGLD, one chain) with and without --cuda-graph: sampling s/iter
#   grid    a reduced paper grid, timed
#   usage: PARTS="tests graph loop" bash benchmarks/gpu_session.sh [grid epochs, default 400]
#          [grid workers, default 16]      (PARTS default: all five)
set -u
OUT=${OUT:-gpu-out}
PARTS=${PARTS:-tests chains graph loop grid}
EPOCHS=${1:-400}
WORKERS=${2:-16}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
PY=${PY:-python3}

part() {  # part NAME SECONDS COMMAND...
  local name=$1 limit=$2 start rc
  shift 2
  case " $PARTS " in *" $name "*) ;; *) return ;; esac
  echo "== $name: $* ($(date +%T))"
  start=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "   rc $rc after $(($(date +%s) - start)) s"
  tail -n 30 "$OUT/$name.log"
}

loop() {  # sampling-phase seconds per iteration of a run, with and without the graph
  local data=/tmp/anti.npz flag device=${DEVICE:-cuda}
  $PY -m bdeeponet.cli generate antiderivative --noise 0.01 --out $data
  for flag in --cuda-graph --no-cuda-graph; do
    rm -rf /tmp/run$flag
    $PY -m bdeeponet.cli train $data --method sgld --epochs 120 --burn-in 60 --device $device \
      --quiet --out /tmp/run$flag $flag || return
    $PY - /tmp/run$flag/history.csv $flag <<'PYEOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))[61:]  # sampling epochs, less the recording one
ms = [1e3 * float(r["sec_per_iter"]) for r in rows]
print(f"{sys.argv[2]:>16}: sampling step {statistics.median(ms):.3f} ms (median of {len(ms)} epochs)")
PYEOF
  done
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
part tests 150 $PY -m pytest -q -p no:cacheprovider tests/test_device.py tests/samplers/test_graph.py
part chains 170 $PY benchmarks/chains_cost.py --quick --device cuda --chains 1 8 64 --pairs 1 \
  --fisher-samples 2 --shared-metric --pde diffusion_reaction
part graph 120 $PY benchmarks/cuda_graph_probe.py --quick --chains 1 64 --pde diffusion_reaction
export -f loop
export PY
part loop 150 bash -c loop
case " $PARTS " in *" grid "*)
  rm -rf /tmp/grid
  start=$(date +%s)
  part grid 170 $PY -m bdeeponet.cli reproduce --out /tmp/grid --epochs "$EPOCHS" \
    --workers "$WORKERS" --device cuda --quiet
  echo "grid: $EPOCHS epochs, $WORKERS workers, $(($(date +%s) - start)) s wall, data generation included"
  cp /tmp/grid/results.md "$OUT/grid-results.md" 2>/dev/null ;;
esac
