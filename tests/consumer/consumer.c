/* A C program using the lookup library through its C API only (lookup/harness_lookup.h).
 *   consumer VARIANT_DIR TP DP  < queries
 * Query lines: "component NAME N A M", "batch NAME N A M [N A M ...]", "collective NAME N",
 * "held_out NAME N A M", "wave_step NAME N A M", "held_out_across_wave_steps NAME",
 * "device_spread NAME".
 * Prints one line per query: the value(s), or "error CODE: MESSAGE". Then it repeats every
 * component query from 4 threads at once and prints "threads: identical" when each thread got
 * exactly the sequential answers. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lookup/harness_lookup.h"

#define MAX_QUERIES 256

typedef struct {
  char component[32];
  int64_t n, a, m;
  double value;
  int status;
} Query;

static Query queries[MAX_QUERIES];
static int query_count = 0;
static harness_lookup* handle = NULL;

static void* rerun(void* arg) {
  int* mismatches = (int*)arg;
  for (int i = 0; i < query_count; ++i) {
    double v = 0;
    const int s = harness_lookup_component(handle, queries[i].component, queries[i].n, queries[i].a,
                                           queries[i].m, &v, NULL);
    if (s != queries[i].status || (s == HARNESS_LOOKUP_OK && v != queries[i].value)) ++*mismatches;
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: consumer VARIANT_DIR TP DP < queries\n");
    return 2;
  }
  if (harness_lookup_open(argv[1], atoi(argv[2]), atoi(argv[3]), 0, -1, NULL, &handle) !=
      HARNESS_LOOKUP_OK) {
    printf("open error: %s\n", harness_lookup_last_error());
    return 1;
  }
  char line[1024];
  while (fgets(line, sizeof line, stdin)) {
    char kind[32], name[32];
    int used = 0;
    if (sscanf(line, "%31s %31s %n", kind, name, &used) < 2) continue;
    if (strcmp(kind, "component") == 0 && query_count < MAX_QUERIES) {
      Query* q = &queries[query_count++];
      strcpy(q->component, name);
      q->n = q->a = q->m = 0;
      sscanf(line + used, "%ld %ld %ld", (long*)&q->n, (long*)&q->a, (long*)&q->m);
      int exact = 0;
      q->status = harness_lookup_component(handle, name, q->n, q->a, q->m, &q->value, &exact);
      if (q->status == HARNESS_LOOKUP_OK)
        printf("%.17g %d\n", q->value, exact);
      else
        printf("error %d: %s\n", q->status, harness_lookup_last_error());
    } else if (strcmp(kind, "batch") == 0) {
      int64_t n[16], a[16], m[16];
      double out[16];
      size_t count = 0;
      const char* p = line + used;
      int consumed = 0;
      long x, y, z;
      while (count < 16 && sscanf(p, "%ld %ld %ld %n", &x, &y, &z, &consumed) == 3) {
        n[count] = x, a[count] = y, m[count] = z, ++count;
        p += consumed;
      }
      const int s = harness_lookup_component_batch(handle, name, count, n, a, m, out);
      for (size_t i = 0; i < count; ++i) printf(isnan(out[i]) ? "nan " : "%.17g ", out[i]);
      printf("status %d %s\n", s, harness_lookup_last_error());
    } else if (strcmp(kind, "collective") == 0) {
      long n = 0;
      sscanf(line + used, "%ld", &n);
      double t = 0, steady = 0;
      int64_t bytes = 0;
      const int s = harness_lookup_collective(handle, name, n, &t, &steady, &bytes);
      if (s == HARNESS_LOOKUP_OK)
        printf("%.17g %.17g %ld\n", t, steady, (long)bytes);
      else
        printf("error %d: %s\n", s, harness_lookup_last_error());
    } else if (strcmp(kind, "wave_step") == 0) {
      long n = 0, a = 0, m = 0;
      sscanf(line + used, "%ld %ld %ld", &n, &a, &m);
      int spans = 0;
      const int s = harness_lookup_wave_step(handle, name, n, a, m, &spans);
      if (s == HARNESS_LOOKUP_OK)
        printf("%d\n", spans);
      else
        printf("error %d: %s\n", s, harness_lookup_last_error());
    } else if (strcmp(kind, "held_out_across_wave_steps") == 0) {
      double median = 0, p95 = 0, max = 0;
      int count = 0;
      const int s =
          harness_lookup_held_out_across_wave_steps(handle, name, &median, &p95, &max, &count);
      if (s == HARNESS_LOOKUP_OK)
        printf("%.17g %.17g %.17g %d\n", median, p95, max, count);
      else
        printf("error %d: %s\n", s, harness_lookup_last_error());
    } else if (strcmp(kind, "device_spread") == 0) {
      double median = 0, max = 0, offset = 0;
      int count = 0;
      const int s = harness_lookup_device_spread(handle, name, &median, &max, &offset, &count);
      if (s == HARNESS_LOOKUP_OK)
        printf("%.17g %.17g %.17g %d\n", median, max, offset, count);
      else
        printf("error %d: %s\n", s, harness_lookup_last_error());
    } else if (strcmp(kind, "held_out") == 0) {
      long n = 0, a = 0, m = 0;
      sscanf(line + used, "%ld %ld %ld", &n, &a, &m);
      double median = 0, p95 = 0, max = 0;
      int count = 0, balanced = 0;
      const int s =
          harness_lookup_held_out(handle, name, n, a, m, &median, &p95, &max, &count, &balanced);
      if (s == HARNESS_LOOKUP_OK)
        printf("%.17g %.17g %.17g %d %d\n", median, p95, max, count, balanced);
      else
        printf("error %d: %s\n", s, harness_lookup_last_error());
    }
  }
  pthread_t threads[4];
  int mismatches[4] = {0, 0, 0, 0};
  for (int t = 0; t < 4; ++t) pthread_create(&threads[t], NULL, rerun, &mismatches[t]);
  for (int t = 0; t < 4; ++t) pthread_join(threads[t], NULL);
  printf(mismatches[0] + mismatches[1] + mismatches[2] + mismatches[3] ? "threads: DIFFERENT\n"
                                                                       : "threads: identical\n");
  harness_lookup_close(handle);
  return 0;
}
