#!/bin/sh
# Usage: fuzz/run.sh [SECONDS]   (default 60)
# Builds the fuzz targets, then fuzzes the reader for SECONDS, then a job's
# opening and analysis for SECONDS. New inputs go to build-fuzz/corpus and
# build-fuzz/corpus-job (fuzz/corpus/ holds only the seeds); a crashing
# input is saved as build-fuzz/crash-* and the script exits non-zero. The
# job target may allocate at most 64 MB at once and 1 GB in all (its inputs
# are a few KB): a file that makes the analysis allocate by a number it
# claims is a crash.
set -eu
cd "$(dirname "$0")/.."
sh fuzz/build.sh
mkdir -p build-fuzz/corpus build-fuzz/corpus-job
build-fuzz/fuzz_reader -max_total_time="${1:-60}" -print_final_stats=1 \
  -artifact_prefix=build-fuzz/ build-fuzz/corpus fuzz/corpus
exec build-fuzz/fuzz_job -max_total_time="${1:-60}" -print_final_stats=1 \
  -malloc_limit_mb=64 -rss_limit_mb=1024 \
  -artifact_prefix=build-fuzz/ build-fuzz/corpus-job fuzz/corpus
