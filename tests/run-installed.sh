#!/usr/bin/env bash
# The test suite against the package as users install it: bash tests/run-installed.sh [PYTEST ARGS]
#
#  1. copies the checkout's files (tracked and new ones, not ignored) into a temporary directory and
#     builds the sdist there, then the wheel from the sdist (python -m build, in a build venv);
#  2. creates a fresh venv with torch==2.13.0 (the small CPU build on a CPU-only machine; pinned
#     here only), the built wheel with the [cuda,test] extras (not editable) and the two example hook
#     distributions;
#  3. runs pytest (-q, three workers with pytest-xdist, and the arguments given; default: the whole
#     suite; -n 0 runs it in one process) with that venv's Python, from a copy of the tree WITHOUT the
#     triton_dist_plugin/ package (tests, kernels, docs, hooks, ...), so the tests, and the processes
#     they start, can only import the installed package. Three workers on two cores: many tests wait
#     on the processes they start (ranks, workers, the console script).
#
# Test-only variables it sets for pytest (none is a setting of the package): TDP_TEST_INSTALLED=1 makes
# conftest.py stop the session unless triton_dist_plugin is the wheel installed in the venv's
# site-packages, and tests/installed_guard.py (copied into that venv, imported at every start-up) makes
# any process of the venv refuse to import it from elsewhere; TDP_TEST_WHEEL, TDP_TEST_SDIST (the built
# files), TDP_TEST_SOURCE (the copy of the checkout they were built from, so that editing the checkout
# while the tests run changes nothing) and TDP_TEST_BUILD_LOG (what the build printed) are what
# tests/test_packaging.py checks.
#
# Nothing is written into the checkout. Everything lives in a temporary directory removed at the end,
# or in $TDP_TEST_WORK if set (kept; .ci/compat reuses the build found there). $TDP_PYTHON (default python3)
# makes the venvs. Sourced, this file only defines its functions (.ci/compat uses them).
set -euo pipefail

TDP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TDP_PYTHON=${TDP_PYTHON:-python3}

# DEST: the checkout's files as git sees them (tracked and untracked, not ignored), without .git.
tdp_copy_checkout() {
  mkdir -p "$1"
  if git -C "$TDP_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$TDP_ROOT" && git ls-files -z --cached --others --exclude-standard \
      | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done \
      | tar --null -T - -cf -) | tar -xf - -C "$1"
  else
    tar -C "$TDP_ROOT" --exclude=.git --exclude='.venv*' --exclude=build --exclude=dist --exclude='*.egg-info' \
      --exclude=__pycache__ -cf - . | tar -xf - -C "$1"
  fi
}

# WORK: WORK/src (the copy), WORK/tree (the copy without the package), WORK/dist (sdist and wheel).
tdp_build() {
  local work=$1
  rm -rf "$work/src" "$work/tree" "$work/dist" "$work/build-venv"
  tdp_copy_checkout "$work/src"
  cp -a "$work/src" "$work/tree" && rm -rf "$work/tree/triton_dist_plugin"
  "$TDP_PYTHON" -m venv "$work/build-venv"
  "$work/build-venv/bin/pip" install -q build
  echo "== building the sdist and the wheel from it (log: $work/build.log)"
  "$work/build-venv/bin/python" -m build --outdir "$work/dist" "$work/src" >"$work/build.log" 2>&1 \
    || { cat "$work/build.log"; return 1; }
  ls "$work"/dist/*.tar.gz "$work"/dist/*.whl
}

tdp_wheel() { local w=("$1"/dist/*.whl); echo "${w[0]}"; }
tdp_sdist() { local s=("$1"/dist/*.tar.gz); echo "${s[0]}"; }

# VENV PIP-ARGS...: a fresh venv with these installed, and the installed-mode guard.
tdp_venv() {
  local venv=$1; shift
  rm -rf "$venv"
  "$TDP_PYTHON" -m venv "$venv"
  "$venv/bin/pip" install -q "$@"
  local site; site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  cp "$TDP_ROOT/tests/installed_guard.py" "$site/_tdp_test_guard.py"
  echo "import _tdp_test_guard" >"$site/_tdp_test_guard.pth"
}

# WORK VENV PYTEST-ARGS...: pytest from WORK/tree with VENV's Python, in installed mode.
tdp_pytest() {
  local work=$1 venv=$2; shift 2
  (cd "$work/tree" && TDP_TEST_INSTALLED=1 TDP_TEST_SOURCE="$work/src" TDP_TEST_WHEEL="$(tdp_wheel "$work")" \
    TDP_TEST_SDIST="$(tdp_sdist "$work")" TDP_TEST_BUILD_LOG="$work/build.log" "$venv/bin/python" -m pytest "$@")
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  work=${TDP_TEST_WORK:-}
  if [ -z "$work" ]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/tdp-installed.XXXXXX")
    trap 'rm -rf "$work"' EXIT
  fi
  export PIP_CACHE_DIR="$work/pip-cache"  # pip's own default is under $HOME
  tdp_build "$work"
  echo "== installing torch==2.13.0 and $(basename "$(tdp_wheel "$work")")[cuda,test] into $work/venv"
  tdp_venv "$work/venv" torch==2.13.0 "$(tdp_wheel "$work")[cuda,test]"
  "$work/venv/bin/pip" install -q --no-deps "$work/src/hooks/tdp-smem-budget" "$work/src/hooks/tdp-redis-store"
  echo "== pytest in $work/tree (no triton_dist_plugin/ there: the installed wheel only)"
  tdp_pytest "$work" "$work/venv" -q -n 3 "$@"
fi
