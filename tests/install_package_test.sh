#!/bin/sh
# Installs libreclaim from the build tree into a fresh prefix, builds
# examples/embed against it with find_package(reclaim), and runs it on a
# test model: it must generate, and leave nothing of the model on the ledger.
#   install_package_test.sh BUILD_DIR SOURCE_DIR LLAMA_PREFIX RECLAIM_BIN
set -eu
build=$1 source=$2 llama_prefix=$3 reclaim=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=$work/spm.gguf
"$reclaim" make-test-model --out "$model" --vocab spm --embd 128 --layers 2 --type f16 >/dev/null
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
# The server's, the audit's and the CLI's headers are not the library's.
for internal in server audit cli; do
  if [ -e "$work/prefix/include/reclaim/$internal" ]; then echo "installed internal headers: $internal"; exit 1; fi
done
test -f "$work/prefix/lib/cmake/reclaim/reclaimConfig.cmake"
test -f "$work/prefix/include/reclaim/reclaim.h"
cmake -S "$source/examples/embed" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix;$llama_prefix" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
"$work/build/embed" "$model" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
cat "$work/out.txt"
grep -q '^generated 16 tokens$' "$work/out.txt"
grep -q '^loaded, with a session: ' "$work/out.txt"
grep -q 'embed/model:' "$work/out.txt"
