#!/bin/sh
# Builds the reader's fuzz target (clang, libFuzzer, ASan, UBSan) into
# build-fuzz/fuzz_reader and writes the seed profiles into fuzz/corpus/.
set -eu
cd "$(dirname "$0")/.."
CC=${CC:-clang}
FLAGS="-std=gnu11 -g -O1 -fno-omit-frame-pointer -Wall -Wextra -Wshadow -Werror -Iinclude -Isrc"
mkdir -p build-fuzz fuzz/corpus
$CC $FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  fuzz/fuzz_reader.c src/format/reader.c src/format/crc32.c src/base/error.c \
  src/base/grow.c \
  -lpthread -o build-fuzz/fuzz_reader
$CC $FLAGS fuzz/make_corpus.c src/format/crc32.c -lpthread \
  -o build-fuzz/make_corpus
build-fuzz/make_corpus fuzz/corpus
