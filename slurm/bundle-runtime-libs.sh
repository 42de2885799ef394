#!/usr/bin/env bash
# Copies the shared libraries that GPU nodes often lack (parallel HDF5 and its compressors,
# yaml-cpp, Boost.Program_options) next to a build, so the harness runs there with
#   export LD_LIBRARY_PATH=$PWD/<dest>:$LD_LIBRARY_PATH
# Usage: slurm/bundle-runtime-libs.sh BUILD_DIR DEST_DIR [extra-soname ...]
set -euo pipefail
build=${1:?build directory}
dest=${2:?destination directory}
shift 2
mkdir -p "$dest"
wanted=(libhdf5_openmpi.so.103 libsz.so.2 libaec.so.0 libyaml-cpp.so.0.7
        libboost_program_options.so.1.74.0 libqhull_r.so.8.0 "$@")
for so in "${wanted[@]}"; do
  # awk reads to the end (no early exit): an early exit would kill the writer with SIGPIPE, which
  # pipefail turns into a silent failure of the whole script.
  path=$(ldconfig -p | awk -v n="$so" '$1 == n && /x86-64/ && !found {print $NF; found = 1}')
  if [ -z "$path" ]; then
    path=$(ldd "$build/harness/harness" | awk -v n="$so" '$1 == n && !found {print $3; found = 1}')
  fi
  [ -n "$path" ] || { echo "bundle-runtime-libs: $so not found" >&2; exit 1; }
  cp -L "$path" "$dest/$so"
done
echo "bundled ${#wanted[@]} libraries into $dest"
