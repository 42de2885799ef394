/* Test-only LD_PRELOAD library: SIGKILLs the process at an exact HDF5 call, so that the kill tests
   can stop a rank at the boundaries of file creation and of a round's commit instead of at a
   random instant. Environment: KILL_CALL (H5Fcreate | H5Gcreate2 | H5Fflush | H5Dwrite), KILL_AT
   (the Nth such call of this process, from 1), KILL_RANK (the OMPI_COMM_WORLD_RANK to kill).
   H5Fcreate and H5Gcreate2 are killed just after the call returns, the others just before it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hdf5.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int calls;

static int reached(const char* fn) {
  const char* call = getenv("KILL_CALL");
  const char* at = getenv("KILL_AT");
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  const char* want = getenv("KILL_RANK");
  return call && at && rank && want && strcmp(call, fn) == 0 && strcmp(rank, want) == 0 &&
         ++calls == atoi(at);
}

hid_t H5Fcreate(const char* name, unsigned flags, hid_t fcpl, hid_t fapl) {
  hid_t (*real)(const char*, unsigned, hid_t, hid_t) = dlsym(RTLD_NEXT, "H5Fcreate");
  const int kill_now = reached("H5Fcreate");
  const hid_t id = real(name, flags, fcpl, fapl);
  if (kill_now) kill(getpid(), SIGKILL);
  return id;
}

hid_t H5Gcreate2(hid_t loc, const char* name, hid_t lcpl, hid_t gcpl, hid_t gapl) {
  hid_t (*real)(hid_t, const char*, hid_t, hid_t, hid_t) = dlsym(RTLD_NEXT, "H5Gcreate2");
  const int kill_now = reached("H5Gcreate2");
  const hid_t id = real(loc, name, lcpl, gcpl, gapl);
  if (kill_now) kill(getpid(), SIGKILL);
  return id;
}

herr_t H5Fflush(hid_t id, H5F_scope_t scope) {
  herr_t (*real)(hid_t, H5F_scope_t) = dlsym(RTLD_NEXT, "H5Fflush");
  if (reached("H5Fflush")) kill(getpid(), SIGKILL);
  return real(id, scope);
}

herr_t H5Dwrite(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t xfer,
                const void* buf) {
  herr_t (*real)(hid_t, hid_t, hid_t, hid_t, hid_t, const void*) = dlsym(RTLD_NEXT, "H5Dwrite");
  if (reached("H5Dwrite")) kill(getpid(), SIGKILL);
  return real(dset, mem_type, mem_space, file_space, xfer, buf);
}
