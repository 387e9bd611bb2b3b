// CUTLASS 3-kernel attention forward for Hopper (sm_90a): S = Q·Kᵀ (CUTLASS GEMM), P = masked
// row softmax(scale·S) (our kernel, softmax.cuh), O = P·V (CUTLASS GEMM), all three on one stream.
//
// The tile configuration comes from preprocessor definitions (one shared library per config,
// built by kernels/cutlass/build.py from tiles.toml):
//   ATTN3K_TILE_M/N/K      CTA tile of both GEMMs (the seeds swept this)
//   ATTN3K_CLUSTER_M       thread-block cluster along M (1 or 2; 2 multicasts the B tile by TMA)
//   ATTN3K_SCHEDULE        1 = KernelTmaWarpSpecialized (one consumer warpgroup, non-persistent)
//                          2 = KernelTmaWarpSpecializedPingpong (persistent, two alternating consumers)
//                          3 = KernelTmaWarpSpecializedCooperative (persistent, two consumers per tile)
//   ATTN3K_STAGES          mainloop pipeline stages; 0 or undefined = CUTLASS's automatic count, which
//                          fills the shared memory left after the epilogue (StageCountAutoCarveout)
//
// Layout: q, k, v, out are contiguous (B, H, S, D). Every (b, h) is one batch entry of a strided
// batched GEMM over L = B·H. S and P are (B·H, S, ld) with ld = S rounded up to 8 so each row is
// 16-byte aligned, as TMA requires. CUTLASS's TMA mainloop and epilogue also require the extent
// of every contiguous mode to be a multiple of 8 elements (cutlass::detail::check_alignment), and
// the key count is the contiguous extent of S (Q·Kᵀ's N) and of P (P·V's K). So the GEMMs run
// over `kv_len` keys, a multiple of 8: kv_len = S when S % 8 == 0 (k and v used in place), else
// kv_len = ld and k, v are zero-padded copies with ld rows per head (made by the caller). The
// extra key columns of S are Q·0 = 0, masked by the softmax, whose P is 0 there.
//
// Host API (extern "C", for ctypes): a plan binds the device buffers once and initialises both
// GEMMs (TMA descriptors, workspace), so a timed call is three launches and nothing else.

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/version.h"

#include "softmax.cuh"

#if !defined(ATTN3K_TILE_M) || !defined(ATTN3K_TILE_N) || !defined(ATTN3K_TILE_K) || \
    !defined(ATTN3K_CLUSTER_M) || !defined(ATTN3K_SCHEDULE)
#error "define ATTN3K_TILE_M, ATTN3K_TILE_N, ATTN3K_TILE_K, ATTN3K_CLUSTER_M and ATTN3K_SCHEDULE"
#endif
#ifndef ATTN3K_STAGES
#define ATTN3K_STAGES 0
#endif

namespace attn3k {

using namespace cute;

using TileShape = Shape<Int<ATTN3K_TILE_M>, Int<ATTN3K_TILE_N>, Int<ATTN3K_TILE_K>>;
using ClusterShape = Shape<Int<ATTN3K_CLUSTER_M>, _1, _1>;

#if ATTN3K_SCHEDULE == 1
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecialized;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#elif ATTN3K_SCHEDULE == 2
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;
#elif ATTN3K_SCHEDULE == 3
using MainloopSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecializedCooperative;
#else
#error "ATTN3K_SCHEDULE must be 1 (warp-specialized), 2 (pingpong) or 3 (cooperative)"
#endif

// One GEMM D = A·B with fp32 accumulation, batched over L, D written in `Element` (no C operand).
// LayoutB RowMajor means B (K×N) has N contiguous: V in P·V. ColumnMajor means K contiguous: K in Q·Kᵀ.
template <typename Element, typename LayoutB>
struct GemmFor {
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutD = cutlass::layout::RowMajor;
  static constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;  // 16 bytes

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD, kAlignment,  // no source tensor: D = accumulator
      Element, LayoutD, kAlignment, EpilogueSchedule>::CollectiveOp;

  using StageChoice = std::conditional_t<
      (ATTN3K_STAGES > 0), cutlass::gemm::collective::StageCount<(ATTN3K_STAGES > 0 ? ATTN3K_STAGES : 1)>,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>>;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, LayoutA, kAlignment,
      Element, LayoutB, kAlignment,
      float, TileShape, ClusterShape, StageChoice, MainloopSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Kernel::StrideA;
  using StrideB = typename Kernel::StrideB;
  using StrideD = typename Kernel::StrideD;
};

// The softmax works on the CUDA types; CUTLASS's half_t/bfloat16_t are layout-identical wrappers.
template <typename Element> struct CudaType;
template <> struct CudaType<cutlass::half_t> { using type = __half; };
template <> struct CudaType<cutlass::bfloat16_t> { using type = __nv_bfloat16; };

thread_local std::string g_last_error;

inline int fail(const std::string& message) {
  g_last_error = message;
  return 1;
}

inline size_t align_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

struct Problem {
  int batch_heads, seq, ld, kv_len, head_dim;
};

// Everything one forward needs, bound once; run() only launches.
struct PlanBase {
  virtual ~PlanBase() = default;
  virtual int run(cudaStream_t stream) = 0;
};

template <typename Element>
struct Plan final : PlanBase {
  using QK = GemmFor<Element, cutlass::layout::ColumnMajor>;
  using PV = GemmFor<Element, cutlass::layout::RowMajor>;

  typename QK::Gemm qk;
  typename PV::Gemm pv;
  const Element* scores = nullptr;
  Element* probs = nullptr;
  int64_t total_rows = 0;
  int seq = 0, ld = 0;
  float scale = 1.f;
  bool causal = false;

  static typename QK::Gemm::Arguments qk_arguments(const Problem& p, const void* q, const void* k,
                                                   void* s, const cutlass::KernelHardwareInfo& hw) {
    const int64_t S = p.seq, D = p.head_dim, ld = p.ld, N = p.kv_len;
    typename QK::StrideA stride_q = make_stride(D, _1{}, S * D);       // (M=S, K=D, L)
    typename QK::StrideB stride_k = make_stride(D, _1{}, N * D);       // (N=kv_len, K=D, L)
    typename QK::StrideD stride_s = make_stride(ld, _1{}, S * ld);     // (M=S, N=kv_len, L)
    return {cutlass::gemm::GemmUniversalMode::kGemm,
            {p.seq, p.kv_len, p.head_dim, p.batch_heads},
            {static_cast<const Element*>(q), stride_q, static_cast<const Element*>(k), stride_k},
            {{1.f, 0.f}, nullptr, stride_s, static_cast<Element*>(s), stride_s},
            hw};
  }

  static typename PV::Gemm::Arguments pv_arguments(const Problem& p, const void* probs, const void* v,
                                                   void* out, const cutlass::KernelHardwareInfo& hw) {
    const int64_t S = p.seq, D = p.head_dim, ld = p.ld, N = p.kv_len;
    typename PV::StrideA stride_p = make_stride(ld, _1{}, S * ld);     // (M=S, K=kv_len, L)
    typename PV::StrideB stride_v = make_stride(_1{}, D, N * D);       // (N=D, K=kv_len, L), N contiguous
    typename PV::StrideD stride_o = make_stride(D, _1{}, S * D);       // (M=S, N=D, L)
    return {cutlass::gemm::GemmUniversalMode::kGemm,
            {p.seq, p.head_dim, p.kv_len, p.batch_heads},
            {static_cast<const Element*>(probs), stride_p, static_cast<const Element*>(v), stride_v},
            {{1.f, 0.f}, nullptr, stride_o, static_cast<Element*>(out), stride_o},
            hw};
  }

  // CUTLASS's own checks of both GEMMs (alignment, extents); host arithmetic only, no device.
  static int can_implement(const Problem& p) {
    cutlass::KernelHardwareInfo hw;
    hw.sm_count = 1;
    cutlass::Status st = QK::Gemm::can_implement(qk_arguments(p, nullptr, nullptr, nullptr, hw));
    if (st != cutlass::Status::kSuccess)
      return fail(std::string("Q·Kᵀ GEMM cannot implement this problem: ") + cutlassGetStatusString(st));
    st = PV::Gemm::can_implement(pv_arguments(p, nullptr, nullptr, nullptr, hw));
    if (st != cutlass::Status::kSuccess)
      return fail(std::string("P·V GEMM cannot implement this problem: ") + cutlassGetStatusString(st));
    return 0;
  }

  static cutlass::KernelHardwareInfo hardware() {
    cutlass::KernelHardwareInfo hw;
    cudaGetDevice(&hw.device_id);
    hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(hw.device_id);
    return hw;
  }

  static int workspace_bytes(const Problem& p, size_t* bytes) {
    const auto hw = hardware();
    auto qk_args = qk_arguments(p, nullptr, nullptr, nullptr, hw);
    auto pv_args = pv_arguments(p, nullptr, nullptr, nullptr, hw);
    *bytes = align_up(QK::Gemm::get_workspace_size(qk_args), 256) + align_up(PV::Gemm::get_workspace_size(pv_args), 256);
    return 0;
  }

  int init(const Problem& p, const void* q, const void* k, const void* v, void* s, void* pbuf, void* out,
           float scale_, int causal_, void* workspace, size_t workspace_size) {
    const auto hw = hardware();
    auto qk_args = qk_arguments(p, q, k, s, hw);
    auto pv_args = pv_arguments(p, pbuf, v, out, hw);
    cutlass::Status st = qk.can_implement(qk_args);
    if (st != cutlass::Status::kSuccess)
      return fail(std::string("Q·Kᵀ GEMM cannot implement this problem: ") + cutlassGetStatusString(st));
    st = pv.can_implement(pv_args);
    if (st != cutlass::Status::kSuccess)
      return fail(std::string("P·V GEMM cannot implement this problem: ") + cutlassGetStatusString(st));
    const size_t qk_ws = align_up(QK::Gemm::get_workspace_size(qk_args), 256);
    const size_t pv_ws = align_up(PV::Gemm::get_workspace_size(pv_args), 256);
    if (qk_ws + pv_ws > workspace_size)
      return fail("workspace too small: need " + std::to_string(qk_ws + pv_ws) + " bytes, got " +
                  std::to_string(workspace_size));
    uint8_t* ws = static_cast<uint8_t*>(workspace);
    st = qk.initialize(qk_args, qk_ws ? ws : nullptr);
    if (st != cutlass::Status::kSuccess)
      return fail(std::string("Q·Kᵀ GEMM initialize failed: ") + cutlassGetStatusString(st));
    st = pv.initialize(pv_args, pv_ws ? ws + qk_ws : nullptr);
    if (st != cutlass::Status::kSuccess)
      return fail(std::string("P·V GEMM initialize failed: ") + cutlassGetStatusString(st));
    scores = static_cast<const Element*>(s);
    probs = static_cast<Element*>(pbuf);
    total_rows = int64_t(p.batch_heads) * p.seq;
    seq = p.seq;
    ld = p.ld;
    scale = scale_;
    causal = causal_ != 0;
    return 0;
  }

  int run(cudaStream_t stream) override {
    cutlass::Status st = qk.run(stream);
    if (st != cutlass::Status::kSuccess)
      return fail(std::string("Q·Kᵀ GEMM launch failed: ") + cutlassGetStatusString(st));
    using T = typename CudaType<Element>::type;
    cudaError_t err = launch_masked_row_softmax<T>(reinterpret_cast<const T*>(scores), reinterpret_cast<T*>(probs),
                                                   total_rows, seq, ld, scale, causal, stream);
    if (err != cudaSuccess) return fail(std::string("softmax launch failed: ") + cudaGetErrorString(err));
    st = pv.run(stream);
    if (st != cutlass::Status::kSuccess)
      return fail(std::string("P·V GEMM launch failed: ") + cutlassGetStatusString(st));
    return 0;
  }
};

inline int check_problem(const Problem& p) {
  if (p.batch_heads < 1 || p.seq < 1 || p.head_dim < 1) return fail("sizes must be positive");
  if (p.ld < p.seq || p.ld % 8 != 0) return fail("ld must be >= seq and a multiple of 8 (16-byte TMA rows)");
  if (p.kv_len < p.seq || p.kv_len > p.ld || p.kv_len % 8 != 0)
    return fail("kv_len must be in [seq, ld] and a multiple of 8 (CUTLASS needs contiguous extents aligned "
                "to 16 bytes): got kv_len=" + std::to_string(p.kv_len) + ", seq=" + std::to_string(p.seq));
  if (p.head_dim % 8 != 0) return fail("head_dim must be a multiple of 8 (16-byte TMA rows)");
  return 0;
}

// dtype: 0 = fp16, 1 = bf16
template <template <typename> class Fn, typename... Args>
int dispatch(int dtype, Args&&... args) {
  if (dtype == 0) return Fn<cutlass::half_t>::call(args...);
  if (dtype == 1) return Fn<cutlass::bfloat16_t>::call(args...);
  return fail("dtype must be 0 (fp16) or 1 (bf16), got " + std::to_string(dtype));
}

template <typename E>
struct KernelInfoFn {
  // which: 0 = Q·Kᵀ GEMM, 1 = P·V GEMM. Dynamic shared memory, pipeline stages, threads per CTA.
  template <typename G>
  static int fill(int* smem, int* stages, int* threads) {
    *smem = int(G::Kernel::SharedStorageSize);
    *stages = int(G::CollectiveMainloop::DispatchPolicy::Stages);
    *threads = int(G::Kernel::MaxThreadsPerBlock);
    return 0;
  }
  static int call(int which, int* smem, int* stages, int* threads) {
    if (which == 0) return fill<typename Plan<E>::QK>(smem, stages, threads);
    if (which == 1) return fill<typename Plan<E>::PV>(smem, stages, threads);
    return fail("which must be 0 (Q·Kᵀ) or 1 (P·V), got " + std::to_string(which));
  }
};

template <typename E>
struct CanImplementFn {
  static int call(const Problem& p) { return Plan<E>::can_implement(p); }
};

template <typename E>
struct WorkspaceFn {
  static int call(const Problem& p, size_t* bytes) { return Plan<E>::workspace_bytes(p, bytes); }
};

template <typename E>
struct CreateFn {
  static int call(const Problem& p, const void* q, const void* k, const void* v, void* s, void* pb, void* out,
                  float scale, int causal, void* ws, size_t ws_bytes, void** plan_out) {
    auto* plan = new Plan<E>();
    if (int rc = plan->init(p, q, k, v, s, pb, out, scale, causal, ws, ws_bytes)) {
      delete plan;
      return rc;
    }
    *plan_out = static_cast<PlanBase*>(plan);
    return 0;
  }
};

}  // namespace attn3k

extern "C" {

// Human-readable reason of the last non-zero return on this thread.
const char* attn3k_last_error() { return attn3k::g_last_error.c_str(); }

// The CUTLASS version the library was built against, as major*100 + minor.
int attn3k_cutlass_version() { return CUTLASS_MAJOR * 100 + CUTLASS_MINOR; }

// Compile-time facts of one GEMM kernel (no device needed): dynamic smem bytes, stages, threads.
int attn3k_kernel_info(int dtype, int which, int* smem_bytes, int* stages, int* threads) {
  return attn3k::dispatch<attn3k::KernelInfoFn>(dtype, which, smem_bytes, stages, threads);
}

// Bytes of device workspace both GEMMs need together (0 for non-persistent schedules).
int attn3k_workspace_bytes(int dtype, int batch_heads, int seq, int ld, int kv_len, int head_dim, size_t* bytes) {
  const attn3k::Problem p{batch_heads, seq, ld, kv_len, head_dim};
  if (int rc = attn3k::check_problem(p)) return rc;
  return attn3k::dispatch<attn3k::WorkspaceFn>(dtype, p, bytes);
}

// 0 when both GEMMs accept the problem (CUTLASS's can_implement; no device needed), else 1 and the reason.
int attn3k_can_implement(int dtype, int batch_heads, int seq, int ld, int kv_len, int head_dim) {
  const attn3k::Problem p{batch_heads, seq, ld, kv_len, head_dim};
  if (int rc = attn3k::check_problem(p)) return rc;
  return attn3k::dispatch<attn3k::CanImplementFn>(dtype, p);
}

// Binds device buffers and initialises both GEMMs; *plan receives an opaque handle.
// k and v hold kv_len rows per head (see the layout note at the top).
int attn3k_plan_create(int dtype, int batch_heads, int seq, int ld, int kv_len, int head_dim, const void* q,
                       const void* k, const void* v, void* scores, void* probs, void* out, float scale, int causal,
                       void* workspace, size_t workspace_bytes, void** plan) {
  const attn3k::Problem p{batch_heads, seq, ld, kv_len, head_dim};
  if (int rc = attn3k::check_problem(p)) return rc;
  return attn3k::dispatch<attn3k::CreateFn>(dtype, p, q, k, v, scores, probs, out, scale, causal, workspace,
                                            workspace_bytes, plan);
}

// Launches Q·Kᵀ, softmax and P·V on `stream` (asynchronous; launch errors are returned).
int attn3k_plan_run(void* plan, cudaStream_t stream) {
  if (plan == nullptr) return attn3k::fail("plan is null");
  return static_cast<attn3k::PlanBase*>(plan)->run(stream);
}

void attn3k_plan_destroy(void* plan) { delete static_cast<attn3k::PlanBase*>(plan); }

}  // extern "C"
