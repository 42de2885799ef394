/* Test-only LD_PRELOAD library: SIGKILLs the process at an exact HDF5 call, so that the kill tests
   can stop a rank at the boundaries of file creation and of a round's commit instead of at a
   random instant. Environment: KILL_CALL (H5Fcreate | H5Gcreate2 | H5Fflush | H5Dwrite), KILL_AT
   (the Nth such call of this process, from 1), KILL_RANK (the OMPI_COMM_WORLD_RANK to kill).
   H5Fcreate and H5Gcreate2 are killed just after the call returns, the others just before it.
   With KILL_CALL=H5Fflush or H5Fclose and KILL_WRITES=W instead of KILL_AT the calls run, and the
   process is killed right after the Wth write to a file made inside calls of that kind, counted
   from the start: a flush or close is several writes (object headers, heaps, B-trees,
   superblock), and a kill between them can leave a file HDF5 cannot read. Counting writes, not
   calls, keeps the kill inside some call whatever the number of calls a run makes.
   KILL_REPORT=PATH (no kill) appends "RANK CALL N WRITES" per completed H5Fflush or H5Fclose to
   PATH (N: the call's index in this process), so that a test can find how many writes a run's
   flushes and closes make. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int calls;
static int flushes;     /* H5Fflush calls of this process */
static int closes;      /* H5Fclose calls of this process */
static int in_call;     /* inside an H5Fflush or H5Fclose */
static int counting;    /* inside a call of the KILL_CALL kind, with KILL_WRITES set */
static int call_writes; /* writes made by the current call */
static int counted;     /* writes made inside calls of the KILL_CALL kind so far */

static int reached(const char* fn) {
  const char* call = getenv("KILL_CALL");
  const char* at = getenv("KILL_AT");
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  const char* want = getenv("KILL_RANK");
  return call && at && rank && want && strcmp(call, fn) == 0 && strcmp(rank, want) == 0 &&
         ++calls == atoi(at);
}

/* Counts a write to a regular file made inside an H5Fflush or H5Fclose (not MPI's socket or pipe
   traffic) and kills after the KILL_WRITES-th one inside calls of the KILL_CALL kind. */
static void wrote(int fd) {
  struct stat st;
  if (!in_call || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
  ++call_writes;
  if (counting && ++counted == atoi(getenv("KILL_WRITES"))) kill(getpid(), SIGKILL);
}

/* Whether writes inside this call of `fn` count towards KILL_WRITES (on the rank to kill). */
static int counts_writes(const char* fn) {
  const char* call = getenv("KILL_CALL");
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  const char* want = getenv("KILL_RANK");
  return getenv("KILL_WRITES") && call && rank && want && strcmp(call, fn) == 0 &&
         strcmp(rank, want) == 0;
}

/* KILL_REPORT: one line per completed flush or close of a file: rank, call, its index, writes. */
static void report(const char* call, int index) {
  const char* path = getenv("KILL_REPORT");
  const char* rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!path) return;
  FILE* f = fopen(path, "a");
  if (!f) return;
  fprintf(f, "%s %s %d %d\n", rank ? rank : "-", call, index, call_writes);
  fclose(f);
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
  ++flushes;
  if (!getenv("KILL_WRITES") && reached("H5Fflush")) kill(getpid(), SIGKILL);
  in_call = 1;
  counting = counts_writes("H5Fflush");
  call_writes = 0;
  const herr_t status = real(id, scope);
  in_call = counting = 0;
  report("H5Fflush", flushes);
  return status;
}

herr_t H5Fclose(hid_t id) {
  herr_t (*real)(hid_t) = dlsym(RTLD_NEXT, "H5Fclose");
  ++closes;
  in_call = 1;
  counting = counts_writes("H5Fclose");
  call_writes = 0;
  const herr_t status = real(id);
  in_call = counting = 0;
  report("H5Fclose", closes);
  return status;
}

herr_t H5Dwrite(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t xfer,
                const void* buf) {
  herr_t (*real)(hid_t, hid_t, hid_t, hid_t, hid_t, const void*) = dlsym(RTLD_NEXT, "H5Dwrite");
  if (reached("H5Dwrite")) kill(getpid(), SIGKILL);
  return real(dset, mem_type, mem_space, file_space, xfer, buf);
}

/* The writes HDF5's file drivers make (sec2: pwrite; MPI-IO: pwrite or pwritev underneath). */
ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) {
  ssize_t (*real)(int, const void*, size_t, off_t) = dlsym(RTLD_NEXT, "pwrite");
  const ssize_t done = real(fd, buf, n, offset);
  wrote(fd);
  return done;
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off64_t offset) {
  ssize_t (*real)(int, const void*, size_t, off64_t) = dlsym(RTLD_NEXT, "pwrite64");
  const ssize_t done = real(fd, buf, n, offset);
  wrote(fd);
  return done;
}

ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
  ssize_t (*real)(int, const struct iovec*, int, off_t) = dlsym(RTLD_NEXT, "pwritev");
  const ssize_t done = real(fd, iov, count, offset);
  wrote(fd);
  return done;
}

ssize_t write(int fd, const void* buf, size_t n) {
  ssize_t (*real)(int, const void*, size_t) = dlsym(RTLD_NEXT, "write");
  const ssize_t done = real(fd, buf, n);
  wrote(fd);
  return done;
}
