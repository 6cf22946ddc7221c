#!/usr/bin/env bash
# GPU checks and figures in one call of a lent GPU machine (figures: benchmarks/README.md).
#
#   OUT=/tmp/gpu bash benchmarks/device_check.sh [PART ...]     (default: step profile memory share fidelity)
#   DRY=1 OUT=/tmp/dry bash benchmarks/device_check.sh [PART ...]   (every part tiny on the CPU: checks the script)
#
# Each part has its own time limit and log, so a part that fails or runs long leaves the others' figures; the
# summary at the end prints every part's exit status. Logs, summary and results files (benchmarks/record.py, in
# results/: copy them into benchmarks/results/ and commit them) are packed into $OUT/device_check.tgz after every
# part, one file because the device tool brings back at most 8. Default parts, in order of priority (issue 24):
#   step: the training step free-running (one sync per 30 steps), 3 interleaved rounds: the released design (4
#      DataLoader workers) vs ours fp32, bf16, bf16 + train.compile, bf16 + compile + CUDA graphs, fp16 + GradScaler
#      (the ratio to the released design of the same run is printed; graph breaks and recompiles too);
#   profile: the `cuda` tests (a CUDA-graph step equals the compiled step bitwise under train.deterministic; the
#      augmentation and prefetch CUDA tests), then one bf16 step under torch.profiler (real syncs over 5 steps,
#      launches per category, busy time without annotation spans);
#   memory: peak memory of a full-batch step of the expensive setups (WRN-28-8 at 80 and 64 px, WRN-37-2 at 96
#      px), fp32 and bf16;
#   share: 1 vs 2 training processes on the GPU (does packing two trials per GPU pay?);
#   fidelity: CIFAR-10 photos (an image folder, 250 labels), FixMatch and MutexMatch, fp32 vs the fast path, two
#      seeds, $FIDELITY_STEPS steps (default 600 here: a short check; FIDELITY_STEPS=3000 in a call of its own),
#      fast path $FIDELITY_FAST (default bf16). Needs the archive copied into the checkout: `mkdir -p .data && cp
#      ../shared/data/cifar10-jpeg.tar.gz .data/` (`.data/` is git-ignored), and `carry: [".data"]` in the call.
# The default parts' limits add up to 515 s: one device call of timeout_s 600 (the machine check and the wheel
# install take ~20 s). Other parts, each in a call of its own: digits (bit-identical resume), augment, cost
# (every experiment setup at the full batch: GPU-hours), and zoo (issue 35), two calls of timeout_s 600:
#   ZOO_SHARD=1/2 OUT=$OUT bash benchmarks/device_check.sh zoo   then   ZOO_SHARD=2/2 ... zoo
#   every registered algorithm (benchmarks/zoo.py reads the registry) for 200 steps, WRN-28-2 B 64 mu 7, in fp32
#   and in its fast path (bf16 + train.compile + train.cuda_graphs; a modifier the trainer refuses, as CUDA graphs
#   for a step of separate forwards, is dropped and its refusal recorded): ms/step, peak memory, the first 5 steps'
#   loss against fp32, errors. Half the registry per call (compiling each algorithm's model costs tens of seconds);
#   no algorithm starts after 470 s, the rest are recorded as skipped: rerun them with ZOO_SHARD=1/1 and
#   ZOO="--steps 200 --algorithms a,b" (DRY=1 runs all of them, tiny, on the CPU with ZOO_SHARD=1/1).
# spanning (issue 30, limit 240 s, a call of its own): benchmarks/span_check.py trains digits 60 steps (evaluating
#   every 30) as the single process and through the trial-spanning path with ONE Ray Train worker holding the GPU
#   (a private local Ray): the process group's backend (NCCL) and world size, train/loss and test/acc of both equal
#   within 1e-5 relative. Needs Ray on the machine (its image has none: carry it).
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
PY=${PYTHON:-python3}
export PY
WANTED=" ${*:-step profile memory share fidelity} "
FIDELITY_STEPS=${FIDELITY_STEPS:-600}
FIDELITY_FAST=${FIDELITY_FAST:-train.precision=bf16}
# DRY=1: every part on the CPU at toy sizes, so the script itself is checked where no GPU is (nothing it prints
# is a measurement). Each part reads its sizes from these variables.
if [[ ${DRY:-0} == 1 ]]; then
  DEV=cpu; STEP="--batch 2 --mu 1 --steps 1 --rounds 1 --images 256 --workers 0"
  PIPES=ours,ours+bf16  # compiling takes minutes on a CPU, CUDA graphs are refused there
  PROF="--batch 2 --mu 1 --warmup 1 --steps 1 --images 256"
  MEM="--batch 2 --mu 1 --setups cnn13@32 --precision fp32"; SHARE="--batch 2 --mu 1 --steps 2"
  FID="--backbone small_cnn --batch 2 --mu 1 --seeds 0,1"; FIDELITY_STEPS=2
  # graphs stays in the fast path to exercise a recorded refusal (CUDA graphs need CUDA); compiling is left out
  ZOO="--backbone small_cnn --batch 2 --mu 1 --steps 2 --warmup 1 --loss-steps 1 --images 256 --fast bf16,graphs"
  ZOO_SHARD=${ZOO_SHARD:-1/1}
  SPAN="--device cpu --steps 4 --eval-interval 2 --set train.batch_size=4 --set train.mu=2"  # gloo, not NCCL
else
  DEV=cuda; STEP="--steps 30 --rounds 3 --workers 4"
  PIPES=ours,ours+bf16,ours+bf16+compile,ours+bf16+compile+graphs,ours+fp16; PROF="--warmup 10 --steps 5 --sync-steps 5"
  MEM="--setups wrn28_8@80,wrn28_8@64,wrn37_2@96 --precision fp32,bf16"; SHARE="--steps 20"; FID=""
  ZOO="--steps 200 --fast bf16,compile,graphs --budget-s 470"  # no algorithm starts after 470 s of the 560
  # deterministic kernels: cuDNN's benchmark mode may pick other kernels in the Ray worker's process
  SPAN="--device cuda --steps 60 --eval-interval 30 --set train.deterministic=true"
fi
ZOO_SHARD=${ZOO_SHARD:-1/2}
export DEV STEP PIPES PROF MEM SHARE FID FIDELITY_STEPS FIDELITY_FAST ZOO ZOO_SHARD SPAN
mkdir -p "$W/results"
pack() { tar -czf "$OUT/device_check.tgz" -C "$W" .; }
part() {  # part NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  [[ $WANTED == *" $name "* ]] || return 0
  [[ ${DRY:-0} == 1 ]] && limit=$((limit * 4))  # a shared CPU is slow even at toy sizes
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
  $PY -c "import torch, torchvision, sys; print(sys.version.split()[0], torch.__version__, torchvision.__version__,
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA', torch.backends.cudnn.version())"
  lscpu | grep -E "Model name|^CPU\(s\)"; } 2>&1 | tee "$W/machine.txt"

# The size variables hold several words each: unquoted on purpose.
step() {
  $PY benchmarks/train_step.py --device $DEV $STEP --pipelines $PIPES \
    --out "$W/results/train_step_${DEV}_wrn28_2.json"
}
export -f step
part step 190 step

profile() {
  $PY -m pytest -q -p no:cacheprovider -rs -m cuda tests/mutexmatch/training/test_compiled.py || return 1
  $PY -m pytest -q -p no:cacheprovider -rs tests/mutexmatch/data/test_augment.py \
    tests/mutexmatch/data/test_augment_fused.py tests/mutexmatch/data/test_prefetch.py -k cuda || return 1
  $PY benchmarks/profile_step.py --device $DEV --precision bf16 $PROF \
    --out "$W/results/profile_${DEV}_wrn28_2_bf16.json"
}
export -f profile
part profile 60 profile

memory() { $PY benchmarks/step_memory.py --device $DEV $MEM; }
export -f memory
part memory 55 memory
share() { $PY benchmarks/gpu_share.py --device $DEV --processes 2 $SHARE; }
export -f share
part share 40 share

fake_photos() {  # ten classes of a few generated photos (DRY=1)
  $PY -c "
import sys
from pathlib import Path
import numpy as np
from PIL import Image
rng = np.random.default_rng(0)
for split, n in (('train', 30), ('test', 4)):
    for c in range(10):
        d = Path(sys.argv[1]) / split / f'class{c}'
        d.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(d / f'{i}.jpg')
" "$1"
}
export -f fake_photos
fidelity() {
  local data=/tmp/cifar10-folder
  if [[ ${DRY:-0} == 1 ]]; then
    data=$W/fake-photos; fake_photos "$data" || return 1
  elif [[ ! -d $data/train ]]; then
    if [[ ! -f .data/cifar10-jpeg.tar.gz ]]; then
      echo "no .data/cifar10-jpeg.tar.gz: copy ../shared/data/cifar10-jpeg.tar.gz into .data/ and carry .data"
      return 1
    fi
    mkdir -p $data && tar xzf .data/cifar10-jpeg.tar.gz -C $data || return 1
  fi
  $PY benchmarks/fidelity.py --data "$data" --device $DEV --steps "$FIDELITY_STEPS" --fast "$FIDELITY_FAST" $FID \
    --out "$W/results/fidelity_${DEV}_cifar10_250.json"
  local rc=$?
  [[ ${DRY:-0} == 1 ]] && rm -rf "$data"
  return $rc
}
export -f fidelity
part fidelity 170 fidelity

zoo() {  # every registered algorithm, fp32 and the fast path: half of the registry per call (ZOO_SHARD=1/2, 2/2)
  local shard=${ZOO_SHARD/\//of}
  $PY benchmarks/zoo.py --device $DEV $ZOO --shard "$ZOO_SHARD" --out "$W/results/zoo_${DEV}_shard${shard}.json"
}
export -f zoo
part zoo 560 zoo

spanning() { $PY benchmarks/span_check.py $SPAN --out "$W/results/span_check_${DEV}.json"; }
export -f spanning
part spanning 240 spanning

part augment 30 $PY benchmarks/augment.py --device cuda --seconds 5 --workers 12

digits() {
  local d=/tmp/digits; rm -rf $d
  local common=(--config experiments/runs/digits.yaml --set train.device=cuda --set train.iterations=600
                --set train.eval_interval=300 --set train.progress=false)
  for det in true false; do
    $PY -m mutexmatch.train "${common[@]}" --set train.deterministic=$det --set output_dir=$d/full_$det || return 1
    $PY -m mutexmatch.train "${common[@]}" --set train.deterministic=$det --set output_dir=$d/resumed_$det \
      --stop-at 300 || return 1
    $PY -m mutexmatch.train --resume $d/resumed_$det || return 1
  done
  for run in full_true resumed_true; do cp $d/$run/metrics.jsonl "$W/digits_$run.jsonl"; done
  $PY -c "
import torch
for det in ('true', 'false'):
    a, b = (torch.load(f'/tmp/digits/{r}_{det}/final_model.pt', weights_only=True, map_location='cpu')
            for r in ('full', 'resumed'))
    diff = max((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].is_floating_point())
    print(f'train.deterministic={det}: final model, uninterrupted vs stopped at 300 and resumed: '
          f'{sum(torch.equal(a[k], b[k]) for k in a)}/{len(a)} tensors bit-identical, largest difference {diff:.3g}')
"
}
export -f digits
part digits 120 digits

cost() {  # every setup at the full batch (B = 64, mu = 7): the expensive ones measured, not scaled
  rm -rf /tmp/cost
  $PY -c "from mutexmatch.data.fake import FakeSize as F, write_fake_root as w; w('/tmp/cost/data', sizes={
    'cifar10': F(400, 1000), 'cifar100': F(100, 100), 'svhn': F(25, 2603), 'stl10': F(500, 800, 20),
    'miniimagenet': F(10, 100), 'tinyimagenet': F(25, 50)})" || return 1
  $PY experiments/estimate_cost.py experiments/table1_cifar_svhn.yaml experiments/table_cnn13_wrn.yaml \
    experiments/ablation_*.yaml experiments/pseudo_label_accuracy.yaml experiments/table2_stl_mini_tiny.yaml \
    --project /tmp/cost --device cuda --threads 4 --steps 10 --cache /tmp/gpu_cost_cache.json
  local rc=$?
  cp /tmp/gpu_cost_cache.json "$W/" 2>/dev/null  # the cache outlives this call's folder: a rerun continues it
  return $rc
}
export -f cost
part cost 300 cost

echo "=== exit status per part:"; for k in "${!RC[@]}"; do echo "  $k ${RC[$k]}"; done
echo "=== results files (copy into benchmarks/results/ and commit):"; ls -1 "$W/results"; pack
nvidia-smi --query-gpu=memory.used,clocks.sm --format=csv 2>/dev/null || true
failed=0; for k in "${!RC[@]}"; do [[ ${RC[$k]} == 0 ]] || failed=$((failed + 1)); done
exit $failed  # the number of parts that failed
