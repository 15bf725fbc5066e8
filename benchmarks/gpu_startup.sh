#!/usr/bin/env bash
# Issue #41 on one GPU, in the order that matters if the device's time runs out: a warm-up start
# (a fresh machine's first start builds its kernels), the agreement of one configuration's
# numbers and ready times between vLLM's default start (spawned engine, a new process that
# imports vLLM: the start before #41) and #41's (engine forked, server forked from the
# launcher) in interleaved rounds, then a 3-trial study with every deployment forked from the
# launcher. Each step writes its output under OUT as it goes.
#   benchmarks/gpu_startup.sh MODEL OUT        (e.g. /root/m80, made by make-model --constructed moe-25g)
# WARMUP=0 skips the warm-up start (the study's first trial is then the machine's first start);
# ROUNDS=N sets the agreement's rounds (default 3), TRIALS=N the study's trials (default 3).
set -u
model=${1:?usage: gpu_startup.sh MODEL OUT}; out=${2:?usage: gpu_startup.sh MODEL OUT}
mkdir -p "$out"
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1  # docs/gpu.md: no first-start sampler build
py=${PYTHON:-python3}
say() { echo "[$(date +%T)] $*" | tee -a "$out/progress.txt"; }
if [ "${WARMUP:-1}" != 0 ]; then
  say "warm-up start"
  $py benchmarks/startup.py --gpus 0 --tp 1 --model "$model" --starts 1 > "$out/warmup.txt" 2>&1
fi
say "agreement: A spawned engine and new process, B forked engine and pre-imported server"
VLLM_WORKER_MULTIPROC_METHOD=spawn $py benchmarks/variant_agreement.py --gpus 0 --tp 1 --model "$model" \
  --loads 2:20,100:200 --runs 1 --rounds "${ROUNDS:-3}" --env-b VLLM_WORKER_MULTIPROC_METHOD=fork --preimported-b \
  --out "$out/agreement.json" > "$out/agreement.txt" 2>&1
say "study: ${TRIALS:-3} trials"
$py -m autotune --workdir "$out/studies" run --model "$model" --gpus 0 --tp 1 \
  --entrypoint "$py -m vllm.entrypoints.cli.main serve" --profile low-concurrency \
  --profile high-concurrency --trials "${TRIALS:-3}" --confirm 0 --no-calibrate --study gpu41 > "$out/study.txt" 2>&1
$py -m autotune --workdir "$out/studies" trials --study gpu41 --format csv > "$out/trials.csv" 2>&1
say "done"
