#!/usr/bin/env bash
# Copies the shared libraries that GPU nodes often lack next to a build, so the harness runs there
# with
#   export LD_LIBRARY_PATH=$PWD/<dest>:$LD_LIBRARY_PATH
# Usage: slurm/bundle-runtime-libs.sh BUILD_DIR DEST_DIR [--self-contained] [extra-soname ...]
# By default: parallel HDF5 and its compressors, yaml-cpp, Boost.Program_options, Qhull.
# --self-contained: for a node without Open MPI (or HDF5, or anything else the build links):
# every library the harness loads except the C and C++ runtimes (glibc, libstdc++, libgcc_s) and
# CUDA's (the driver, cudart, cuBLAS, CUPTI, NCCL: the node's own), and Open MPI's components in
# DEST_DIR/openmpi with the libraries they load (not the network transports or OpenSHMEM). One
# rank then runs without a launcher, as an isolated singleton, with the three variables the
# script prints.
set -euo pipefail
build=${1:?build directory}
dest=${2:?destination directory}
shift 2
self_contained=0
if [ "${1:-}" = --self-contained ]; then
  self_contained=1
  shift
fi
harness="$build/harness/harness"
[ -x "$harness" ] || { echo "bundle-runtime-libs: no harness binary at $harness (build first)" >&2; exit 1; }
mkdir -p "$dest"

# The libraries a node must provide itself: a second copy of these breaks the process.
system_lib='^(ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libcupti|libnccl|libnvidia-.*)\.so'

# "soname path" for every library FILE loads that ldd resolves; fails naming what it cannot.
resolved_libs() {
  local file=$1 out
  out=$(ldd "$file") || { echo "bundle-runtime-libs: ldd failed on $file" >&2; return 1; }
  if grep -q "not found" <<<"$out"; then
    echo "bundle-runtime-libs: $file needs libraries this machine lacks:" >&2
    grep "not found" <<<"$out" >&2
    return 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$out"
}

# Where this machine has SONAME: the loader's cache, else where the harness finds it; fails naming
# it. (awk reads to the end, no early exit: an early exit would kill the writer with SIGPIPE,
# which pipefail turns into a silent failure of the whole script.)
find_lib() {
  local so=$1 path
  path=$(ldconfig -p | awk -v n="$so" '$1 == n && /x86-64/ && !found {print $NF; found = 1}')
  [ -n "$path" ] || path=$(ldd "$harness" | awk -v n="$so" '$1 == n && !found {print $3; found = 1}')
  [ -n "$path" ] || { echo "bundle-runtime-libs: $so not found" >&2; return 1; }
  echo "$path"
}

# Each library once, and DEST_DIR/bundled.txt says where each came from ("soname path").
declare -A copied=()
: >"$dest/bundled.txt"
copy_lib() {  # SONAME PATH
  [ -n "${copied[$1]:-}" ] && return 0
  cp -L "$2" "$dest/$1"
  copied[$1]=$2
  echo "$1 $2" >>"$dest/bundled.txt"
}

if [ "$self_contained" = 1 ]; then
  command -v ompi_info >/dev/null || { echo "bundle-runtime-libs: ompi_info not found (Open MPI's)" >&2; exit 1; }
  components=$(ompi_info --parsable --path pkglibdir | awk -F: '$2 == "pkglibdir" {print $3}')
  [ -d "$components" ] || { echo "bundle-runtime-libs: Open MPI's component directory '$components' not found" >&2; exit 1; }
  rm -rf "$dest/openmpi"
  mkdir -p "$dest/openmpi"
  files=("$harness")
  for c in "$components"/mca_*.so; do
    # One rank without a launcher uses no network transport (InfiniBand verbs, libfabric, UCX,
    # PSM) and no OpenSHMEM: those components and the libraries they pull in stay behind.
    [[ $(basename "$c") =~ ^mca_((spml|atomic|sshmem|scoll|memheap)_|.*(ucx|ofi|openib|psm|verbs)) ]] && continue
    cp -L "$c" "$dest/openmpi/"
    files+=("$c")
  done
  for f in "${files[@]}"; do
    libs=$(resolved_libs "$f")  # (not read from a process substitution, whose failure is lost)
    while read -r so path; do
      [ -z "$so" ] || [[ $so =~ $system_lib ]] || copy_lib "$so" "$path"
    done <<<"$libs"
  done
  for so in "$@"; do
    path=$(find_lib "$so")
    copy_lib "$so" "$path"
  done
  echo "bundled ${#copied[@]} libraries and $(find "$dest/openmpi" -name "*.so" | wc -l) Open MPI components into $dest"
  abs=$(cd "$dest" && pwd)
  echo "on the node (one rank, no launcher; CUDA's libraries from the node's own install):"
  echo "  export LD_LIBRARY_PATH=$abs:\$LD_LIBRARY_PATH OMPI_MCA_mca_base_component_path=$abs/openmpi OMPI_MCA_ess_singleton_isolated=1"
  exit 0
fi

wanted=(libhdf5_openmpi.so.103 libsz.so.2 libaec.so.0 libyaml-cpp.so.0.7
        libboost_program_options.so.1.74.0 libqhull_r.so.8.0 "$@")
for so in "${wanted[@]}"; do
  path=$(find_lib "$so")
  copy_lib "$so" "$path"
done
echo "bundled ${#wanted[@]} libraries into $dest"
