// The C API over Deployment and CollectiveTable (lookup/harness_lookup.h): exceptions become
// error codes and a thread-local message; queries on one handle are serialized by its mutex.
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>
#include <string>

#include "lookup/harness_lookup.h"
#include "lookup/lookup.h"

struct harness_lookup {
  moe::Deployment components;
  std::optional<moe::CollectiveTable> collectives;
  std::string collectives_error;  // why there is no collective table
  std::mutex mu;
};

namespace {

thread_local std::string g_last_error;

int fail(int code, const std::string& message) {
  g_last_error = message;
  return code;
}

template <typename F>
int guarded(F&& f) {
  try {
    g_last_error.clear();
    return f();
  } catch (const std::exception& e) {
    return fail(HARNESS_LOOKUP_ERROR, e.what());
  } catch (...) {
    return fail(HARNESS_LOOKUP_ERROR, "unknown error");
  }
}

// `f(c)` for the component named `name`; an unknown name is refused.
template <typename F>
int for_component(const char* name, F&& f) {
  const auto c = moe::parse_component(name);
  if (!c)
    return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "unknown component '" + std::string(name) + "'");
  return f(*c);
}

// `f(c)` for the component named `name`, under the handle's lock and guarded (no exception
// leaves it); an unknown name is refused.
template <typename F>
int locked_component(harness_lookup* h, const char* name, F&& f) {
  return for_component(name, [&](moe::Component c) {
    return guarded([&] {
      const std::lock_guard lock(h->mu);
      return f(c);
    });
  });
}

// Held-out errors into a caller's out-pointers (each may be NULL).
void copy_errors(const moe::HeldOutErrors& e, double* median, double* p95, double* max,
                 int* count) {
  if (median) *median = e.median;
  if (p95) *p95 = e.p95;
  if (max) *max = e.max;
  if (count) *count = e.count;
}

}  // namespace

extern "C" {

int harness_lookup_open(const char* variant_dir, int tp, int dp, int rank, int sp,
                        const char* expect_device, harness_lookup** out) {
  if (!variant_dir || !out) return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "null argument");
  *out = nullptr;
  return guarded([&] {
    moe::DeploymentKey key;
    key.tp = tp, key.dp = dp, key.rank = rank;
    if (sp == 0 || sp == 1) key.sp = sp == 1;
    if (expect_device) key.expect_device = expect_device;
    auto h = new harness_lookup{moe::Deployment::load(variant_dir, key), std::nullopt, {}, {}};
    try {
      h->collectives.emplace(moe::CollectiveTable::load(variant_dir, key));
    } catch (const std::exception& e) {
      h->collectives_error = e.what();
    }
    *out = h;
    return HARNESS_LOOKUP_OK;
  });
}

int harness_lookup_component(harness_lookup* h, const char* component, int64_t tokens,
                             int64_t activated, int64_t assignments, double* time_us, int* exact) {
  if (!h || !component || !time_us) return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "null argument");
  return locked_component(h, component, [&](moe::Component c) {
    const auto r = h->components.query(c, tokens, activated, assignments);
    *time_us = r.time_us;
    if (exact) *exact = r.exact ? 1 : 0;
    return HARNESS_LOOKUP_OK;
  });
}

int harness_lookup_held_out(harness_lookup* h, const char* component, int64_t tokens,
                            int64_t activated, int64_t assignments, double* median, double* p95,
                            double* max, int* count, int* balanced) {
  if (!h || !component) return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "null argument");
  return locked_component(h, component, [&](moe::Component c) {
    const auto e = h->components.held_out_errors(c, tokens, activated, assignments);
    if (!e)
      throw moe::LookupError(std::string(component) +
                             ": the bundle records no held-out errors (published before them)");
    copy_errors(*e, median, p95, max, count);
    if (balanced) *balanced = e->routing.empty() ? -1 : e->routing == "balanced" ? 1 : 0;
    return HARNESS_LOOKUP_OK;
  });
}

int harness_lookup_wave_step(harness_lookup* h, const char* component, int64_t tokens,
                             int64_t activated, int64_t assignments, int* spans) {
  if (!h || !component || !spans) return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "null argument");
  return locked_component(h, component, [&](moe::Component c) {
    const auto r = h->components.query(c, tokens, activated, assignments);
    const auto s = h->components.spans_launch_wave_step(c, r);
    *spans = !s ? -1 : *s ? 1 : 0;
    return HARNESS_LOOKUP_OK;
  });
}

int harness_lookup_device_spread(harness_lookup* h, const char* component, double* median,
                                 double* max, double* largest_offset, int* count) {
  if (!h || !component) return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "null argument");
  return locked_component(h, component, [&](moe::Component c) {
    const auto s = h->components.device_spread(c);
    if (!s)
      throw moe::LookupError(std::string(component) +
                             ": the bundle records no spread between devices (published before "
                             "it)");
    if (median) *median = s->median;
    if (max) *max = s->max;
    if (largest_offset) *largest_offset = s->largest_offset;
    if (count) *count = s->count;
    return HARNESS_LOOKUP_OK;
  });
}

int harness_lookup_held_out_across_wave_steps(harness_lookup* h, const char* component,
                                              double* median, double* p95, double* max,
                                              int* count) {
  if (!h || !component) return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "null argument");
  return locked_component(h, component, [&](moe::Component c) {
    const auto e = h->components.held_out_errors_across_wave_steps(c);
    if (!e)
      throw moe::LookupError(std::string(component) +
                             ": the bundle records no held-out errors across launch-wave steps "
                             "(a backend that declares no waves, or published before them)");
    copy_errors(*e, median, p95, max, count);
    return HARNESS_LOOKUP_OK;
  });
}

int harness_lookup_component_batch(harness_lookup* h, const char* component, size_t count,
                                   const int64_t* tokens, const int64_t* activated,
                                   const int64_t* assignments, double* out_us) {
  if (!h || !component || !tokens || !out_us || (count && (!activated || !assignments)))
    return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "null argument");
  return for_component(component, [&](moe::Component c) {
    g_last_error.clear();
    int status = HARNESS_LOOKUP_OK;
    const std::lock_guard lock(h->mu);
    for (size_t i = 0; i < count; ++i) {
      try {
        out_us[i] = h->components.query(c, tokens[i], activated[i], assignments[i]).time_us;
      } catch (const std::exception& e) {
        out_us[i] = std::numeric_limits<double>::quiet_NaN();
        if (status == HARNESS_LOOKUP_OK)
          status = fail(HARNESS_LOOKUP_ERROR, "query " + std::to_string(i) + ": " + e.what());
      }
    }
    return status;
  });
}

int harness_lookup_collective(harness_lookup* h, const char* collective, int64_t tokens,
                              double* time_us, double* steady_time_us, int64_t* bytes) {
  if (!h || !collective) return fail(HARNESS_LOOKUP_INVALID_ARGUMENT, "null argument");
  if (!h->collectives) return fail(HARNESS_LOOKUP_ERROR, h->collectives_error);
  return guarded([&] {
    const auto r = h->collectives->query(collective, tokens);  // const, thread-safe
    if (time_us) *time_us = r.time_us;
    if (steady_time_us) *steady_time_us = r.steady_time_us;
    if (bytes) *bytes = r.bytes;
    return HARNESS_LOOKUP_OK;
  });
}

const char* harness_lookup_last_error(void) {
  return g_last_error.c_str();
}

void harness_lookup_close(harness_lookup* h) {
  delete h;
}

}  // extern "C"
