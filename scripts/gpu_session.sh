#!/usr/bin/env bash
# One session on a lent GPU machine: the measurements committed under gpuwise/data/measured/ and
# docs/gpu-runs.md came from this script. Run from the repository root on the GPU machine:
#
#   bash scripts/gpu_session.sh OUTDIR
#
# The machine has PyTorch but no Ray or pydantic and no network: their wheels travel in .whl/
# (ignored by git; see docs/gpu-runs.md for how they were fetched, and Ray's Java/RLlib/Tune/Serve/
# Data parts stripped to fit the 64 MiB transfer). Each part has its own time limit so that one
# stuck part leaves the others' results; every output lands in OUTDIR as it is written.
#   1. gpu.txt                the card, driver and torch
#   2. slot_device.log        the runtime's slot worker on cuda:0 without Ray (NCCL, checkpoint, user script)
#   3. run.json / run.err     `gpuwise run` on Ray with the card as its one slot (--devices cuda)
#      run_measurements.csv   the runtime's measured step times and peaks next to its predictions
#   4. gpu_runs.csv           python -m gpuwise.validation.gpu_measure: the grid's peaks and step times
#   5. gpu_varying_runs.csv   gpu_measure --set varying: drawn lengths and two micro-batches a step (copy it to
#                             gpuwise/data/measured/gpu/: `validate gpu --simulate-allocator` scores it, held out)
#   6. kernels.csv            KERNELS=1 (its own call): python -m gpuwise.validation.kernel_measure, bf16 GEMM and
#                             flash-attention rates at the grid's and check set's shapes, `--compare`d with
#                             op_efficiency.csv
#   7. gpu_adapter_runs.csv   ADAPTERS=1: gpu_measure --set adapters, the adapters' counted traffic and the padding
#                             mask's memory-efficient kernel (never measured yet)
set -u
OUTDIR=${1:?usage: bash scripts/gpu_session.sh OUTDIR}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
SITE=/tmp/gpuwise-site
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  tar -xzf .whl/ray*-stripped.tar.gz -C "$SITE"
fi
export PYTHONPATH="$PWD:$SITE"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, ray; print('torch', torch.__version__, torch.cuda.get_device_name(0)); print('ray', ray.__version__)"
  nproc; } > "$OUTDIR/gpu.txt" 2>&1
cat "$OUTDIR/gpu.txt"
if [ "${DIAGNOSE:-0}" != 1 ] && [ "${MEASURE:-0}" != 1 ] && [ "${KERNELS:-0}" != 1 ]; then
echo "== slot worker on cuda (no Ray)"
timeout "${SLOT_S:-90}" python3 benchmarks/runtime_slot_device.py --device cuda > "$OUTDIR/slot_device.log" 2>&1
echo "rc=$?"; tail -5 "$OUTDIR/slot_device.log"
echo "== gpuwise run on Ray, one real GPU"
rm -rf /tmp/gpuwise-smoke
timeout "${RUN_S:-150}" python3 -m gpuwise.cli.main run --cluster examples/run/one-h200.yaml \
  --workload examples/run/gpu-smoke.yaml --policy fifo --devices cuda --json --state /tmp/gpuwise-smoke \
  > "$OUTDIR/run.json" 2> "$OUTDIR/run.err"
echo "rc=$?"; tail -3 "$OUTDIR/run.err"
cp /tmp/gpuwise-smoke/measurements.csv "$OUTDIR/run_measurements.csv" 2>/dev/null
echo "== gpu_measure grid"
timeout "${GRID_S:-300}" python3 -m gpuwise.validation.gpu_measure --out "$OUTDIR/gpu_runs.csv" 2>&1 | cut -c1-400
echo "grid rc=${PIPESTATUS[0]}"
echo "== gpu_measure varying (drawn lengths, two micro-batches a step: the allocator simulation's unmeasured parts)"
timeout "${VARY_S:-240}" python3 -m gpuwise.validation.gpu_measure --set varying \
  --out "$OUTDIR/gpu_varying_runs.csv" 2>&1 | cut -c1-400
echo "varying rc=${PIPESTATUS[0]}"
fi

# ADAPTERS=1: the LoRA adapters' counted traffic (PEFT's float32 layers, dropout) and the padding mask's
# memory-efficient kernel, whose rate the step-time model assumes (gpu_measure --set adapters; about a minute)
if [ "${ADAPTERS:-0}" = 1 ]; then
  echo "== gpu_measure adapters"
  timeout "${ADAPT_S:-200}" python3 -m gpuwise.validation.gpu_measure --set adapters \
    --out "$OUTDIR/gpu_adapter_runs.csv" 2>&1 | cut -c1-400
  echo "adapters rc=${PIPESTATUS[0]}"
fi

# KERNELS=1: its own call (the default call's parts already fill a 600 s command): GEMM and attention rates at the
# rows' shapes, the roofline's constants kernel by kernel, then compared with op_efficiency.csv
if [ "${KERNELS:-0}" = 1 ]; then
  echo "== kernels"
  timeout "${KERNEL_S:-300}" python3 -m gpuwise.validation.kernel_measure --out "$OUTDIR/kernels.csv" 2>&1 | tail -3
  echo "kernels rc=${PIPESTATUS[0]}"
  python3 -m gpuwise.validation.kernel_measure --compare "$OUTDIR/kernels.csv" 2>&1 | tail -2
fi

# Second call (after the first run's analysis): what is live at the peak where the model and the GPU
# disagreed, then the held-out configurations (gpu_measure --set check), not printed, so that nothing
# is tuned on them before they are scored.
if [ "${DIAGNOSE:-0}" = 1 ]; then
  echo "== peaks"
  timeout "${PEAK_S:-200}" python3 -m gpuwise.validation.gpu_peak \
    --config llama-3.2-1b,1,32768,bf16-mixed,full,0,, \
    --config llama-2-7b,2,2048,bf16-mixed,none,16,,lora_targets=all-linear \
    --config mpt-1b,4,2048,bf16-mixed,none,0,,compile=1 \
    --config gemma-2b,2,2048,bf16-mixed,full,0,, \
    --config mpt-1b,4,2048,bf16-mixed,none,0,,activation_offload=1 \
    --config mpt-1b,4,2048,bf16-mixed,none,0,, > "$OUTDIR/peaks.jsonl" 2> "$OUTDIR/peaks.err"
  echo "peaks rc=$?"; wc -l "$OUTDIR/peaks.jsonl"; tail -2 "$OUTDIR/peaks.err"
  echo "== held-out set"
  timeout "${CHECK_S:-200}" python3 -m gpuwise.validation.gpu_measure --set check --out "$OUTDIR/check_runs.csv" \
    > "$OUTDIR/check.log" 2>&1
  echo "check rc=$?"; grep -c "^status=ok" "$OUTDIR/check.log"
fi

# Third call (MEASURE=1): the grid and the held-out set again with the leak check and the optimizer
# implementation stated in every prediction (the first run's rows after the optimizer-in-backward row
# carried that row's 14.6 GiB; docs/gpu-runs.md)
# GRID_FROM=FILE resumes that grid file: its ok rows stay, its error rows are measured again (the fourth
# call resumed the third's file after the hooks' leak was fixed; the check set was clean and not rerun).
if [ "${MEASURE:-0}" = 1 ]; then
  [ -n "${GRID_FROM:-}" ] && cp "$GRID_FROM" "$OUTDIR/gpu_runs.csv"
  timeout "${GRID_S:-200}" python3 -m gpuwise.validation.gpu_measure --out "$OUTDIR/gpu_runs.csv" 2>&1 | cut -c1-200
  echo "grid rc=${PIPESTATUS[0]}"
  [ "${CHECK_S:-150}" = 0 ] || timeout "${CHECK_S:-150}" python3 -m gpuwise.validation.gpu_measure --set check --out "$OUTDIR/check_runs.csv" \
    > "$OUTDIR/check.log" 2>&1
  echo "check rc=$?"; grep -c "^status=ok" "$OUTDIR/check.log"
fi
