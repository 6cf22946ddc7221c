#!/usr/bin/env bash
# GPU checks and figures in one call of a lent GPU machine (figures: benchmarks/README.md).
#
#   OUT=/tmp/gpu bash benchmarks/device_check.sh [PART ...]     (default: parts 1-5)
#
# Each part has its own time limit and log, so a part that fails or runs long leaves the others' figures; the
# summary at the end prints every part's exit status. Logs, summary and results files (benchmarks/record.py, in
# results/: copy them into benchmarks/results/ and commit them) are packed into $OUT/device_check.tgz after every
# part, one file because the device tool brings back at most 8. Parts, in order of priority:
#   1. step_fp32: the training-step benchmark (ours vs the released design) on CUDA, fp32, DataLoader workers as
#      released (4);
#   2. step_bf16: the same with bf16 autocast for ours and 12 DataLoader workers for the reference (its best on
#      16 cores), and whether the side-stream prefetch and the fused SGD pay (ours_on_demand, ours_sgd_foreach);
#   3. profile: the CUDA-only tests (augmentation and prefetch without synchronisation, side-stream batches equal
#      inline ones), then one steady-state step under torch.profiler, fp32 and bf16 (kernel time by category, GPU
#      idle, CPU launch time) and its device->host synchronisations (set_sync_debug_mode);
#   4. augment: the augmentation benchmark on CUDA;
#   5. digits: end to end on CUDA: an uninterrupted run and one stopped half-way and resumed (bit-identical with
#      train.deterministic), the same pair without it, and a bf16 run;
#   6. cost: per-setup step and evaluation times of every experiment YAML on CUDA (GPU-hours), cached as it goes;
#   7. memory: peak GPU memory of a full-batch step per backbone and image size, fp32 and bf16 (what fits);
#   8. share: two training processes on one GPU vs one alone (do the YAMLs' `gpu: 0.5` trials pay?).
# The default (parts 1-5) fits one call of under 9 minutes: its limits add up to 520 s. Parts 6-8 need calls of
# their own: `... device_check.sh cost share` (280 s of limits), `... device_check.sh memory` (300 s).
# Python packages the machine lacks travel as wheels in .whl (pydantic and its needs).
set -u
OUT=${OUT:?set OUT to a folder for logs}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/device_check.XXXXXX)  # what is packed into $OUT/device_check.tgz
export W
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 1
else
  export PYTHONPATH=$PWD
fi
declare -A RC
WANTED=" ${*:-step_fp32 step_bf16 profile augment digits} "
mkdir -p "$W/results"
pack() { tar -czf "$OUT/device_check.tgz" -C "$W" .; }
part() {  # part NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  [[ $WANTED == *" $name "* ]] || return 0
  echo "=== $name (limit ${limit}s): $*" | tee -a "$W/summary.txt"
  local t0=$SECONDS
  # timeout signals its whole process group, so a part's child processes stop with it
  timeout --kill-after=5 "$limit" bash -c '"$@"' _ "$@" >"$W/$name.log" 2>&1
  RC[$name]=$?
  echo "=== $name: rc=${RC[$name]} in $((SECONDS - t0)) s" | tee -a "$W/summary.txt"
  tail -n 24 "$W/$name.log"
  pack
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c "import torch, torchvision, sys; print(sys.version.split()[0], torch.__version__, torchvision.__version__,
torch.cuda.get_device_name(0), torch.backends.cudnn.version())"
  lscpu | grep -E "Model name|^CPU\(s\)"; } 2>&1 | tee "$W/machine.txt"

part step_fp32 195 python3 benchmarks/train_step.py --device cuda --steps 30 --rounds 2 --workers 4 \
  --pipelines ours,ours_compile,ours_deterministic --out "$W/results/train_step_cuda_wrn28_2_fp32.json"
part step_bf16 85 python3 benchmarks/train_step.py --device cuda --steps 30 --rounds 1 --workers 12 \
  --precision bf16 --pipelines ours,ours_on_demand,ours_sgd_foreach --out "$W/results/train_step_cuda_wrn28_2_bf16.json"

profile() {
  python3 -m pytest -q -p no:cacheprovider tests/mutexmatch/test_augment.py tests/mutexmatch/test_prefetch.py \
    -k cuda || return 1
  for precision in fp32 bf16; do
    python3 benchmarks/profile_step.py --device cuda --precision $precision --warmup 10 --steps 5 \
      --out "$W/results/profile_cuda_wrn28_2_$precision.json" || return 1
  done
}
export -f profile
part profile 70 profile
part augment 30 python3 benchmarks/augment.py --device cuda --seconds 5 --workers 12

digits() {
  local d=/tmp/digits; rm -rf $d
  local common=(--config experiments/runs/digits.yaml --set train.device=cuda --set train.iterations=600
                --set train.eval_interval=300 --set train.progress=false)
  for det in true false; do
    python3 -m mutexmatch.train "${common[@]}" --set train.deterministic=$det --set output_dir=$d/full_$det || return 1
    python3 -m mutexmatch.train "${common[@]}" --set train.deterministic=$det --set output_dir=$d/resumed_$det \
      --stop-at 300 || return 1
    python3 -m mutexmatch.train --resume $d/resumed_$det || return 1
  done
  python3 -m mutexmatch.train "${common[@]}" --set output_dir=$d/bf16 --set train.precision=bf16 || return 1
  for run in full_true resumed_true bf16; do cp $d/$run/metrics.jsonl "$W/digits_$run.jsonl"; done
  python3 - <<'EOF'
import torch
for det in ("true", "false"):
    a, b = (torch.load(f"/tmp/digits/{r}_{det}/final_model.pt", weights_only=True, map_location="cpu")
            for r in ("full", "resumed"))
    diff = max((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].is_floating_point())
    print(f"train.deterministic={det}: final model, uninterrupted vs stopped at 300 and resumed: "
          f"{sum(torch.equal(a[k], b[k]) for k in a)}/{len(a)} tensors bit-identical, largest difference {diff:.3g}")
EOF
}
export -f digits
part digits 140 digits

cost() {
  rm -rf /tmp/cost
  python3 -c "from mutexmatch.fakedata import FakeSize as F, write_fake_root as w; w('/tmp/cost/data', sizes={
    'cifar10': F(400, 1000), 'cifar100': F(100, 100), 'svhn': F(25, 2603), 'stl10': F(500, 800, 20),
    'miniimagenet': F(10, 100), 'tinyimagenet': F(25, 50)})" || return 1
  python3 experiments/estimate_cost.py experiments/table1_cifar_svhn.yaml experiments/table_cnn13_wrn.yaml \
    experiments/ablation_*.yaml experiments/pseudo_label_accuracy.yaml experiments/table2_stl_mini_tiny.yaml \
    --project /tmp/cost --device cuda --threads 4 --steps 10 --batch-for wrn37_2=32 \
    --batch-for wrn28_8@miniimagenet=16 --batch-for wrn28_8@tinyimagenet=16 --cache /tmp/gpu_cost_cache.json
  local rc=$?
  cp /tmp/gpu_cost_cache.json "$W/" 2>/dev/null  # the cache outlives this call's folder: a rerun continues it
  return $rc
}
export -f cost
part cost 190 cost

part memory 300 python3 benchmarks/step_memory.py --device cuda
part share 90 python3 benchmarks/gpu_share.py --device cuda --processes 2 --steps 30

echo "=== exit status per part:"; for k in "${!RC[@]}"; do echo "  $k ${RC[$k]}"; done
echo "=== results files (copy into benchmarks/results/ and commit):"; ls -1 "$W/results"; pack
nvidia-smi --query-gpu=memory.used,clocks.sm --format=csv || true
failed=0; for k in "${!RC[@]}"; do [[ ${RC[$k]} == 0 ]] || failed=$((failed + 1)); done
exit $failed  # the number of parts that failed
