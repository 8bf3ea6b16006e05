#!/bin/sh
# Runs every benchmark against the build in $1 (default: build).
set -e
B=${1:-build}
echo "== hot path (bench_zone)"
"$B/bench_zone"
echo
echo "== sampler at 10 Hz (bench_sampler)"
"$B/bench_sampler" "$B/mlprof"
echo
echo "== report and trace at scale (bench_report)"
"$B/bench_report" "$B/mlprof"
echo
echo "== distributed report, 64 ranks x 1 M spans (bench_dist)"
"$B/bench_dist" "$B/mlprof"
echo
echo "== Parquet export and DuckDB over it (bench_parquet, 4 ranks x 500 k spans)"
py=""
[ -x .venv/bin/python ] && .venv/bin/python -c "import duckdb" 2>/dev/null && py=.venv/bin/python
"$B/bench_parquet" "$B/mlprof" "$py"
if [ -x "$B/bench_mpi" ] && command -v mpirun.openmpi >/dev/null; then
  echo
  echo "== capture cost per MPI collective (bench_mpi, 2 ranks)"
  d=$(mktemp -d)
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    "$B/mlprof" run -q -o "$d/run" -- mpirun.openmpi -np 2 --oversubscribe "$B/bench_mpi"
  rm -rf "$d"
fi
if [ -x "$B/bench_nvtx" ]; then
  echo
  echo "== NVTX push/pop recorded by libmlprof (bench_nvtx)"
  "$B/bench_nvtx" "$(cd "$B" && pwd)/libmlprof.so"
fi
