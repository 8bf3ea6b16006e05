#!/bin/sh
# Usage: fuzz/run.sh [SECONDS]   (default 60)
# Builds the fuzz target, then fuzzes the reader for SECONDS. New inputs go to
# build-fuzz/corpus (fuzz/corpus/ holds only the seeds); a crashing input is
# saved as build-fuzz/crash-* and the script exits non-zero.
set -eu
cd "$(dirname "$0")/.."
sh fuzz/build.sh
mkdir -p build-fuzz/corpus
exec build-fuzz/fuzz_reader -max_total_time="${1:-60}" -print_final_stats=1 \
  -artifact_prefix=build-fuzz/ build-fuzz/corpus fuzz/corpus
