#!/bin/sh
# Runs every benchmark against the build in $1 (default: build).
set -e
B=${1:-build}
echo "== hot path (bench_zone)"
"$B/bench_zone"
echo
echo "== sampler at 10 Hz (bench_sampler)"
"$B/bench_sampler"
echo
echo "== report and trace at scale (bench_report)"
"$B/bench_report" "$B/mlprof"
