#!/usr/bin/env bash
# One prepared GPU session (a lent H100/H200 gives about 15 minutes in all): the GPU tests,
# chains as a batch, a CUDA-graph probe of one chain's step, and a reduced paper grid, timed.
# Each part has its own time limit and log under $OUT (default gpu-out/), so one part that
# overruns costs only its own result.
#   usage: bash benchmarks/gpu_session.sh [grid epochs, default 400] [grid workers, default 16]
set -u
OUT=${OUT:-gpu-out}
EPOCHS=${1:-400}
WORKERS=${2:-16}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
PY=python3

part() {  # part NAME SECONDS COMMAND...
  local name=$1 limit=$2 start rc
  shift 2
  echo "== $name: $* ($(date +%T))"
  start=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "   rc $rc after $(($(date +%s) - start)) s"
  tail -n 30 "$OUT/$name.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
part tests 100 $PY -m pytest -q -p no:cacheprovider tests/test_device.py
part chains 170 $PY benchmarks/chains_cost.py --quick --device cuda --chains 1 8 64 --pairs 1 \
  --fisher-samples 2 --shared-metric --pde diffusion_reaction
part graph 70 $PY benchmarks/cuda_graph_probe.py --quick --chains 1 --pde diffusion_reaction
rm -rf /tmp/grid
start=$(date +%s)
part grid 170 $PY -m bdeeponet.cli reproduce --out /tmp/grid --epochs "$EPOCHS" \
  --workers "$WORKERS" --device cuda --quiet
echo "grid: $EPOCHS epochs, $WORKERS workers, $(($(date +%s) - start)) s wall, data generation included"
cp /tmp/grid/results.md "$OUT/grid-results.md" 2>/dev/null
