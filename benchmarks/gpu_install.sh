#!/usr/bin/env bash
# On a GPU machine without network (docs/gpu.md): join the offline bundle's parts, copied there
# one per device call into PARTS (with bundle.sha256 and autotune's own wheels in PARTS/extra),
# check them, install vLLM 0.26 and those wheels into SITE, and write the constructed 25 GB
# model (moe-25g, MTP acceptance 0.8) to MODEL. Then: export PYTHONPATH=SITE:REPO.
#   benchmarks/gpu_install.sh /root/parts /root/site /root/m80
set -euo pipefail
parts=${1:?usage: gpu_install.sh PARTS SITE MODEL}; site=${2:?}; model=${3:?}
repo=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "[$(date +%T)] $*"; }
say "join and check"
(cd "$parts" && cat part.* > bundle.tar && sha256sum -c bundle.sha256 && mkdir -p whl \
  && tar xf bundle.tar -C whl && rm bundle.tar part.*)
say "install"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$parts"/whl/*.whl "$parts"/extra/*.whl
export PYTHONPATH="$site:$repo"
python3 -c "import vllm, optuna; print('vllm', vllm.__version__, 'optuna', optuna.__version__)"
say "model"
[ -e "$model/config.json" ] || python3 -m autotune make-model "$model" --constructed moe-25g --mtp-acceptance 0.8
say "done"
