/* The lookup library's C API (docs/bundle-format.md#reading-a-bundle): open a bundle's tables for
 * one deployment, query component and collective times, close. No exception crosses it: every
 * call returns HARNESS_LOOKUP_OK or an error code, and harness_lookup_last_error() gives the
 * message of this thread's last failing call. A handle may be queried from several threads at
 * once (queries are serialized on the handle); open and close are not concurrent with queries. */
#ifndef HARNESS_LOOKUP_H
#define HARNESS_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  HARNESS_LOOKUP_OK = 0,
  HARNESS_LOOKUP_ERROR = 1,           /* the bundle, the table or the query was refused */
  HARNESS_LOOKUP_INVALID_ARGUMENT = 2 /* a null pointer or an unknown component name */
};

typedef struct harness_lookup harness_lookup;

/* Opens the tables of deployment (tp, dp, rank) of the bundle variant directory `variant_dir`.
 * `sp`: 0 or 1, or -1 when the deployment has only one entry. `expect_device`: NULL, or a GPU
 * UUID or part of its name; tables measured elsewhere are refused. */
int harness_lookup_open(const char* variant_dir, int tp, int dp, int rank, int sp,
                        const char* expect_device, harness_lookup** out);

/* Component time (µs): `component` is gate_routing, experts, finalize_copy or wrapper; local
 * components use `tokens` only, experts (N, A, M). `exact` (may be NULL) is set to 1 for a
 * measured row. */
int harness_lookup_component(harness_lookup* h, const char* component, int64_t tokens,
                             int64_t activated, int64_t assignments, double* time_us, int* exact);

/* `count` queries of one component; out_us[i] is NaN where query i was refused, and the call
 * returns HARNESS_LOOKUP_ERROR with the first refusal's message when any was. */
int harness_lookup_component_batch(harness_lookup* h, const char* component, size_t count,
                                   const int64_t* tokens, const int64_t* activated,
                                   const int64_t* assignments, double* out_us);

/* How well the component's table predicted points it was not built from, as its held-out
 * |relative error| (median, p95, max over `count` points): for experts those of the query's
 * routing class — `balanced` set to 1 when (activated, assignments) is the balanced routing of
 * `tokens`, 0 when not — where the bundle records both, else the table's whole held-out set
 * (`balanced` = -1). HARNESS_LOOKUP_ERROR where the bundle records none. Out-pointers may be
 * NULL. */
int harness_lookup_held_out(harness_lookup* h, const char* component, int64_t tokens,
                            int64_t activated, int64_t assignments, double* median, double* p95,
                            double* max, int* count, int* balanced);

/* Whether the experts answer at (tokens, activated, assignments) interpolates across a launch-wave
 * step of the backend that measured it (its vertices run different launch waves): `spans` set to
 * 1 or 0, or -1 where that is not known (another component, an exact row, or a bundle that records
 * no waves). HARNESS_LOOKUP_ERROR where the point is refused or the bundle's row clocks are
 * corrupt. */
int harness_lookup_wave_step(harness_lookup* h, const char* component, int64_t tokens,
                             int64_t activated, int64_t assignments, int* spans);

/* The held-out |relative error| of the component's table over its points whose prediction spanned
 * a launch-wave step (what applies where harness_lookup_wave_step says 1). HARNESS_LOOKUP_ERROR
 * where the bundle records no such split. Out-pointers may be NULL. */
int harness_lookup_held_out_across_wave_steps(harness_lookup* h, const char* component,
                                              double* median, double* p95, double* max, int* count);

/* How far apart GPUs of the kind measured the same points of the component's table (held-out
 * points measured again on another device by a later refinement stage, and rows a device new to
 * the campaign measured again as anchors; no interpolation): |relative difference| median and
 * max over `count` such held-out points (count 0: none, e.g. one device measured them all), and
 * `largest_offset`, the signed median of the device pair furthest apart among those of at least
 * 5 points of either record (0 where none). A GPU that did not measure the table may be off by as
 * much. HARNESS_LOOKUP_ERROR where the bundle records neither (published before the split).
 * Out-pointers may be NULL. */
int harness_lookup_device_spread(harness_lookup* h, const char* component, double* median,
                                 double* max, double* largest_offset, int* count);

/* A collective of the deployment's collective table at per-DP-rank `tokens`: kernel time,
 * steady-state time and bytes (each pointer may be NULL). */
int harness_lookup_collective(harness_lookup* h, const char* collective, int64_t tokens,
                              double* time_us, double* steady_time_us, int64_t* bytes);

/* The message of this thread's last failing call ("" when none). Valid until the next call. */
const char* harness_lookup_last_error(void);

void harness_lookup_close(harness_lookup* h);

#ifdef __cplusplus
}
#endif

#endif /* HARNESS_LOOKUP_H */
