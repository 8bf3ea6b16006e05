#!/bin/sh
# Builds the fuzz targets (clang, libFuzzer, ASan, UBSan) into build-fuzz/:
# fuzz_reader (the reader) and fuzz_job (a job opened and analysed), and
# writes the seed profiles into fuzz/corpus/.
set -eu
cd "$(dirname "$0")/.."
CC=${CC:-clang}
FLAGS="-std=gnu11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wshadow -Werror -Iinclude -Isrc"
mkdir -p build-fuzz fuzz/corpus
$CC $FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  fuzz/fuzz_reader.c src/format/reader.c src/format/crc32.c src/base/error.c \
  src/base/grow.c \
  -lpthread -o build-fuzz/fuzz_reader
# The job target: the reader, the job and every analysis, as listed for the
# build (src/sources/*.txt, one path a line), with the build's flags.
JOB_SOURCES=$(grep -hv '^#' src/sources/base.txt src/sources/format.txt \
  src/sources/model.txt src/sources/analyze.txt)
$CC $FLAGS -D_GNU_SOURCE -Wno-unused-parameter \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  fuzz/fuzz_job.c $JOB_SOURCES -lm -lpthread -o build-fuzz/fuzz_job
$CC $FLAGS fuzz/make_corpus.c src/format/crc32.c -lpthread \
  -o build-fuzz/make_corpus
build-fuzz/make_corpus fuzz/corpus
