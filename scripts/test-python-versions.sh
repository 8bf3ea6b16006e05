#!/bin/sh
# The Python package's tests that need no torch, under each CPython newer
# than the project's (3.12+) found on the machine: the python-native image's
# pyenv has 3.12 and 3.13 (PYTHONS="..." names others). Each gets an
# environment of its own (BUILD/venv-X.Y: pytest, setuptools, wheel) and a
# build of the package (BUILD/python-X.Y), which mlprof run's start-up
# module is taken from. With none found, says so and succeeds: the project
# installs no other Python. With "bench", runs the call tracer's benchmark
# (bench/bench_calls.py, ARGS passed on) instead, beside the peers pinned in
# tests/requirements.txt, installed into that environment.
#   test-python-versions.sh BUILD [bench [ARGS...]]
set -e
build=$(cd "${1:?usage: test-python-versions.sh BUILD [bench [ARGS...]]}" && pwd)
shift
mode=${1:-test}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
pythons=${PYTHONS:-$(ls -d /root/.pyenv/versions/3.1[2-9]*/bin/python3 2>/dev/null || true)}
if [ -z "$pythons" ]; then
  echo "no CPython 3.12 or newer here (PYTHONS=... names some): not tested"
  exit 0
fi
for py in $pythons; do
  v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  env="$build/venv-$v" pkg="$build/python-$v"
  echo "== Python $v ($py)"
  if [ ! -x "$env/bin/python" ]; then
    "$py" -m venv "$env"
    "$env/bin/python" -m pip install -q pytest==9.2.0 setuptools==84.2.1 wheel==0.48.0
  fi
  rm -rf "$pkg"
  "$env/bin/python" -m pip install -q --no-deps --no-build-isolation --target "$pkg" "$root/python"
  if [ "$mode" = bench ]; then
    "$env/bin/python" -m pip install -q $(grep -E '^(viztracer|yappi|pyinstrument|line_profiler)==' "$root/tests/requirements.txt")
    PYTHONPATH="$pkg" "$env/bin/python" "$root/bench/bench_calls.py" "$@"
    continue
  fi
  MLPROF_BUILD="$build" PYTHONPATH="$pkg" MLPROF_PY_STARTUP="$pkg/mlprof/_startup" \
    "$env/bin/python" -m pytest -q "$root/tests/python/test_api.py" \
    "$root/tests/python/test_calls.py" "$root/tests/python/test_lines.py" \
    "$root/tests/python/test_package.py" "$root/tests/python/test_descriptors.py" \
    "$root/tests/python/test_stacks.py" "$root/tests/python/test_stacks_native.py" \
    "$root/tests/python/test_stacks_pprof.py"
done
