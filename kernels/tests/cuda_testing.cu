// The GPU tests' entry points: drive the engines with hand-made inputs (route-validation cases,
// graph capture) outside the Workload protocol. Compiled into the GPU test program only.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <limits>
#include <stdexcept>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_workloads.cuh"
#include "kernels/device_weights.cuh"
#include "kernels/experts_engine.cuh"
#include "kernels/gate_engine.cuh"
#include "kernels/gpu_reference.cuh"
#include "kernels/tests/cuda_testing.h"

namespace moe {

using namespace cuda;

namespace {

// Captures what `enqueue` queues on `s` into a CUDA graph, launches it once and waits for it.
template <class Enqueue>
void run_as_graph(cudaStream_t s, const Enqueue& enqueue) {
  HARNESS_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(s, &graph);  // leave capture mode before unwinding
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  HARNESS_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  HARNESS_CHECK(made);
  const cudaError_t launched = cudaGraphLaunch(exec, s);
  const cudaError_t synced = cudaStreamSynchronize(s);
  cudaGraphExecDestroy(exec);
  HARNESS_CHECK(launched);
  HARNESS_CHECK(synced);
}

}  // namespace

DeviceExpertsResult run_experts_on_device(const std::string& backend, int device,
                                          const ModelGeometry& g, const Target& t,
                                          const std::vector<float>& x, const Routes& routes,
                                          const MlpWeights& w, bool via_graph) {
  if (!known_cuda_backend(backend))
    throw std::invalid_argument("unknown CUDA backend '" + backend + "'");
  HARNESS_CHECK(cudaSetDevice(device));
  Stream stream;
  Cublas blas(stream.get());
  const auto own = ExpertOwnership::of(g, t);
  DeviceMlp mlp(own.local_experts, g.hidden, g.intermediate, 1, stream.get());
  HARNESS_CHECK(cudaStreamSynchronize(stream.get()));
  mlp.w13 = upload_bf16(w.w13);
  mlp.w2 = upload_bf16(w.w2);
  auto dx = upload_bf16(x);
  DeviceBuffer<bf16> out(x.size());
  HARNESS_CHECK(cudaMemset(out.get(), 0xff, out.size() * 2));
  // Copies from pageable memory on the legacy stream may still be landing, and the engine's
  // stream does not wait for that stream.
  HARNESS_CHECK(cudaDeviceSynchronize());
  ExpertsEngine engine(g, own, routes, stream.get(), blas.get(), backend == "native");
  engine.upload_routes(routes);
  engine.forward(dx.get(), mlp, out.get());
  HARNESS_CHECK(cudaStreamSynchronize(stream.get()));
  if (via_graph) {
    HARNESS_CHECK(cudaMemsetAsync(out.get(), 0xff, out.size() * 2, stream.get()));
    run_as_graph(stream.get(), [&] { engine.forward(dx.get(), mlp, out.get()); });
  }
  DeviceExpertsResult r;
  r.route_error = engine.take_flag();
  r.out = download_bf16(out.get(), out.size());
  return r;
}

DeviceGateResult run_gate_on_device(const std::string& backend, int device, const ModelGeometry& g,
                                    const std::vector<float>& x, const std::vector<float>& router,
                                    bool via_graph) {
  if (!known_cuda_backend(backend))
    throw std::invalid_argument("unknown CUDA backend '" + backend + "'");
  HARNESS_CHECK(cudaSetDevice(device));
  Stream stream;
  Cublas blas(stream.get());
  const int rows = static_cast<int>(x.size() / g.hidden);
  // The GEMM's padding rows are NaN: a padding row that reached a routed row's logits would show.
  std::vector<float> padded = x;
  padded.resize(static_cast<std::size_t>(GateEngine::input_rows(rows)) * g.hidden,
                std::numeric_limits<float>::quiet_NaN());
  auto dx = upload_bf16(padded);
  DeviceBuffer<bf16> router_bf16;
  DeviceBuffer<float> router_f32;
  const void* router_ptr = nullptr;
  if (g.router_dtype == Dtype::fp32) {
    router_f32 = DeviceBuffer<float>(router.size());
    HARNESS_CHECK(
        cudaMemcpy(router_f32.get(), router.data(), router.size() * 4, cudaMemcpyHostToDevice));
    router_ptr = router_f32.get();
  } else {
    router_bf16 = upload_bf16(router);
    router_ptr = router_bf16.get();
  }
  const std::size_t lanes = static_cast<std::size_t>(rows) * g.top_k;
  DeviceBuffer<int> ids(lanes), flag(1);
  DeviceBuffer<float> weights(lanes);
  // The uploads above ran on the legacy stream, which the engine's stream does not wait for.
  HARNESS_CHECK(cudaDeviceSynchronize());
  GateEngine engine(g, rows, router_ptr, stream.get(), blas.get());
  const auto poison = [&] {
    HARNESS_CHECK(cudaMemsetAsync(ids.get(), 0x7f, lanes * 4, stream.get()));
    HARNESS_CHECK(cudaMemsetAsync(weights.get(), 0xff, lanes * 4, stream.get()));
    HARNESS_CHECK(cudaMemsetAsync(flag.get(), 0, sizeof(int), stream.get()));
  };
  const auto enqueue = [&] { engine.forward(dx.get(), ids.get(), weights.get(), flag.get()); };
  poison();
  if (via_graph) {
    enqueue();  // a direct forward first, as a workload would run before capturing
    poison();
    run_as_graph(stream.get(), enqueue);
  } else {
    enqueue();
  }
  HARNESS_CHECK(cudaStreamSynchronize(stream.get()));
  DeviceGateResult r;
  r.routes = Routes{rows, g.top_k, std::vector<int>(lanes), download_f32(weights.get(), lanes)};
  if (lanes)
    HARNESS_CHECK(cudaMemcpy(r.routes.ids.data(), ids.get(), lanes * 4, cudaMemcpyDeviceToHost));
  int raised = 0;
  HARNESS_CHECK(cudaMemcpy(&raised, flag.get(), sizeof(int), cudaMemcpyDeviceToHost));
  r.route_error = raised != 0;
  return r;
}

std::vector<float> gpu_reference_experts(int device, const ModelGeometry& g, const Target& t,
                                         const std::vector<float>& x, const Routes& routes,
                                         const MlpWeights& w) {
  HARNESS_CHECK(cudaSetDevice(device));
  Stream stream;
  const auto dx = upload_bf16(x), w13 = upload_bf16(w.w13), w2 = upload_bf16(w.w2);
  DeviceBuffer<float> out(x.size());
  HARNESS_CHECK(cudaMemset(out.get(), 0, out.size() * 4));
  HARNESS_CHECK(cudaDeviceSynchronize());  // legacy-stream uploads before the reference's stream
  const auto lanes = routed_lanes(routes, ExpertOwnership::of(g, t));
  reference_mlp(dx.get(), lanes, w13.get(), w2.get(), g.hidden, g.intermediate, true, out.get(),
                stream.get());
  return download_f32(out.get(), out.size());
}

std::vector<float> gpu_reference_wrapper(int device, const ModelGeometry& g,
                                         const std::vector<float>& x,
                                         const std::vector<float>& routed,
                                         const MlpWeights& shared) {
  HARNESS_CHECK(cudaSetDevice(device));
  Stream stream;
  const auto dx = upload_bf16(x), w13 = upload_bf16(shared.w13), w2 = upload_bf16(shared.w2);
  auto out = upload(routed);
  HARNESS_CHECK(cudaDeviceSynchronize());
  const int rows = static_cast<int>(x.size() / g.hidden);
  reference_mlp(dx.get(), shared_lanes(rows, shared.experts), w13.get(), w2.get(), g.hidden,
                shared.intermediate, false, out.get(), stream.get());
  return download_f32(out.get(), out.size());
}

GpuGateReference gpu_reference_gate(int device, const ModelGeometry& g, const std::vector<float>& x,
                                    const std::vector<float>& router) {
  HARNESS_CHECK(cudaSetDevice(device));
  Stream stream;
  const int rows = static_cast<int>(x.size() / g.hidden);
  const auto dx = upload_bf16(x);
  const auto router_bf16 =
      g.router_dtype == Dtype::bf16 ? upload_bf16(router) : DeviceBuffer<bf16>();
  const auto router_f32 = g.router_dtype == Dtype::fp32 ? upload(router) : DeviceBuffer<float>();
  const void* r = g.router_dtype == Dtype::fp32 ? static_cast<const void*>(router_f32.get())
                                                : static_cast<const void*>(router_bf16.get());
  DeviceBuffer<float> dense(static_cast<std::size_t>(rows) * g.experts);
  DeviceBuffer<int> ambiguous(static_cast<std::size_t>(rows));
  HARNESS_CHECK(cudaDeviceSynchronize());
  reference_gate(dx.get(), rows, r, g.router_dtype, g, dense.get(), ambiguous.get(), stream.get());
  HARNESS_CHECK(cudaStreamSynchronize(stream.get()));
  GpuGateReference out{download_f32(dense.get(), dense.size()),
                       std::vector<int>(static_cast<std::size_t>(rows))};
  if (rows)
    HARNESS_CHECK(cudaMemcpy(out.ambiguous.data(), ambiguous.get(), rows * sizeof(int),
                             cudaMemcpyDeviceToHost));
  return out;
}

double gpu_relative_error(int device, const std::vector<float>& got,
                          const std::vector<float>& want) {
  HARNESS_CHECK(cudaSetDevice(device));
  Stream stream;
  const auto dgot = upload_bf16(got);
  const auto dwant = upload(want);
  HARNESS_CHECK(cudaDeviceSynchronize());
  DeviceComparison cmp(stream.get());
  cmp.add(dgot.get(), dwant.get(), want.size());
  return cmp.relative_error();
}

}  // namespace moe
