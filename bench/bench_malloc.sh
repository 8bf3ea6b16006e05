#!/bin/sh
# The allocation hooks' cost per malloc+free pair (bench/bench_malloc.c):
# untraced, then under `mlprof run` with each --memory mode, interleaved
# over ROUNDS rounds; the median of each.
#   sh bench/bench_malloc.sh [BUILD] [ROUNDS]
set -e
B=${1:-build}
R=${2:-5}
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
for r in $(seq "$R"); do
  echo "untraced $("$B/bench_malloc" | cut -d' ' -f2)" >> "$d/all"
  for m in off sampled all; do
    v=$("$B/mlprof" run -q --memory=$m -o "$d/$m-$r" -- "$B/bench_malloc" |
      cut -d' ' -f2)
    echo "$m $v" >> "$d/all"
  done
done
echo "ns per malloc+free pair (sizes 16 B to 4 KiB), median of $R rounds:"
for m in untraced off sampled all; do
  grep "^$m " "$d/all" | cut -d' ' -f2 | sort -n |
    awk -v m="$m" '{v[NR] = $1} END {printf "  %-10s %8.1f\n", m, v[int((NR + 1) / 2)]}'
done
