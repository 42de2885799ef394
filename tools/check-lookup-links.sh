#!/usr/bin/env bash
# The lookup library links alone: a program linked only against it must not need MPI, HDF5,
# CUDA, CUPTI, NCCL or Boost at run time, and must start (it reports a missing bundle, exit 1).
set -euo pipefail
probe="$1"
forbidden='libmpi|libopen-pal|libopen-rte|libhdf5|libcuda|libcudart|libcupti|libnccl|libcublas|libboost'
libs=$(ldd "$probe")
if grep -E "$forbidden" <<<"$libs"; then
  echo "lookup_links_alone: $probe needs the libraries above; the lookup library must not" >&2
  exit 1
fi
set +e
out=$("$probe" /nonexistent-bundle 2>&1)
rc=$?
set -e
if [ "$rc" -ne 1 ] || ! grep -q "no bundle here" <<<"$out"; then
  echo "lookup_links_alone: the probe did not run as expected (rc $rc): $out" >&2
  exit 1
fi
echo "lookup_links_alone: $(wc -l <<<"$libs") shared libraries, none of MPI/HDF5/CUDA/Boost"
