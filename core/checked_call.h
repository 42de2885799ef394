// One checked-call helper for every C library the harness calls: CUDA runtime, cuBLAS, CUPTI,
// NCCL, MPI and HDF5 (docs/design.md).
//
//   HARNESS_CHECK(cudaMalloc(&p, n));          // throws CallError: call, library message,
//   file:line HARNESS_CHECK_NOTHROW(cudaFree(p));        // destructors: reports to stderr, returns
//   false HARNESS_CHECK_MPI(MPI_Barrier(c));         // MPI and HDF5 return plain integers hid_t f
//   = HARNESS_CHECK_H5(H5Fopen(...));  // an HDF5 handle comes back through the check
//
// A library's status type is described by a CallStatus<Status> specialisation below. Each one is
// compiled when that library's own header was included before this one (its version macro is
// defined), so core/ itself needs none of these libraries. The file has one include guard per
// section on purpose: including it again after another library's header adds that section.

#ifndef HARNESS_CHECKED_CALL_CORE
#define HARNESS_CHECKED_CALL_CORE

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace moe {

class CallError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Specialised per status type: static bool ok(Status); static std::string message(Status);
// static constexpr const char* library.
template <class Status>
struct CallStatus;

// An MPI return code, and an HDF5 return value (herr_t or hid_t: negative means failure).
struct MpiCall {
  int code;
};
struct H5Call {
  std::int64_t value;
};

template <>
struct CallStatus<H5Call> {
  static bool ok(H5Call s) { return s.value >= 0; }
  static std::string message(H5Call) { return "failed"; }
  static constexpr const char* library = "HDF5";
};

namespace detail {

template <class Status>
std::string call_failure(Status s, const char* expr, const char* file, int line) {
  return std::string(expr) + ": " + CallStatus<Status>::library + " " +
         CallStatus<Status>::message(s) + " (" + file + ":" + std::to_string(line) + ")";
}

template <class Status>
auto passed_value(Status s) {
  if constexpr (std::is_same_v<Status, H5Call>)
    return s.value;
  else
    return s;
}

}  // namespace detail

// Returns the status (an HDF5 call's value) when it succeeded; throws CallError otherwise.
template <class Status>
auto check_call(Status s, const char* expr, const char* file, int line) {
  if (!CallStatus<Status>::ok(s)) throw CallError(detail::call_failure(s, expr, file, line));
  return detail::passed_value(s);
}

// For destructors and cleanup paths: never throws; prints the failure and returns false.
template <class Status>
bool check_call_nothrow(Status s, const char* expr, const char* file, int line) noexcept {
  try {
    if (CallStatus<Status>::ok(s)) return true;
    std::fprintf(stderr, "harness: %s\n", detail::call_failure(s, expr, file, line).c_str());
  } catch (...) {
  }
  return false;
}

}  // namespace moe

#define HARNESS_CHECK(expr) ::moe::check_call((expr), #expr, __FILE__, __LINE__)
#define HARNESS_CHECK_NOTHROW(expr) ::moe::check_call_nothrow((expr), #expr, __FILE__, __LINE__)
#define HARNESS_CHECK_MPI(expr) ::moe::check_call(::moe::MpiCall{(expr)}, #expr, __FILE__, __LINE__)
#define HARNESS_CHECK_MPI_NOTHROW(expr) \
  ::moe::check_call_nothrow(::moe::MpiCall{(expr)}, #expr, __FILE__, __LINE__)
#define HARNESS_CHECK_H5(expr) ::moe::check_call(::moe::H5Call{(expr)}, #expr, __FILE__, __LINE__)

#endif  // HARNESS_CHECKED_CALL_CORE

#if defined(CUDART_VERSION) && !defined(HARNESS_CHECKED_CALL_CUDA)
#define HARNESS_CHECKED_CALL_CUDA
template <>
struct moe::CallStatus<cudaError_t> {
  static bool ok(cudaError_t s) { return s == cudaSuccess; }
  static std::string message(cudaError_t s) { return cudaGetErrorString(s); }
  static constexpr const char* library = "CUDA";
};
#endif

#if defined(CUBLAS_VER_MAJOR) && !defined(HARNESS_CHECKED_CALL_CUBLAS)
#define HARNESS_CHECKED_CALL_CUBLAS
template <>
struct moe::CallStatus<cublasStatus_t> {
  static bool ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
  static std::string message(cublasStatus_t s) { return cublasGetStatusString(s); }
  static constexpr const char* library = "cuBLAS";
};
#endif

#if defined(CUPTI_API_VERSION) && !defined(HARNESS_CHECKED_CALL_CUPTI)
#define HARNESS_CHECKED_CALL_CUPTI
template <>
struct moe::CallStatus<CUptiResult> {
  static bool ok(CUptiResult s) { return s == CUPTI_SUCCESS; }
  static std::string message(CUptiResult s) {
    const char* text = nullptr;
    cuptiGetResultString(s, &text);
    return text ? text : "status " + std::to_string(static_cast<int>(s));
  }
  static constexpr const char* library = "CUPTI";
};
#endif

#if defined(NCCL_MAJOR) && !defined(HARNESS_CHECKED_CALL_NCCL)
#define HARNESS_CHECKED_CALL_NCCL
template <>
struct moe::CallStatus<ncclResult_t> {
  static bool ok(ncclResult_t s) { return s == ncclSuccess; }
  static std::string message(ncclResult_t s) { return ncclGetErrorString(s); }
  static constexpr const char* library = "NCCL";
};
#endif

#if defined(MPI_VERSION) && !defined(HARNESS_CHECKED_CALL_MPI)
#define HARNESS_CHECKED_CALL_MPI
template <>
struct moe::CallStatus<moe::MpiCall> {
  static bool ok(moe::MpiCall s) { return s.code == MPI_SUCCESS; }
  static std::string message(moe::MpiCall s) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    if (MPI_Error_string(s.code, text, &len) != MPI_SUCCESS)
      return "error " + std::to_string(s.code);
    return std::string(text, static_cast<std::size_t>(len));
  }
  static constexpr const char* library = "MPI";
};
#endif
