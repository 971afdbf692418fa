// The optimizer updates' kernels: SGD and Adam, one parameter a launch or a table of small ones
// a launch (Note [Small updates grouped] in graph/group_updates.cc), each element by the same
// function either way. A kernel source fragment: elementwise.cu includes it inside its
// namespace after common.cuh; test/emu includes it after test/emu/cuda_emu.h and
// device_math.cuh, to run it on the CPU (Note [CUDA kernels emulated on the CPU]).
// The learning rate and the step count are read from device memory inside the kernels, never
// on the host: a recorded device graph then sees every new value (docs/design.md, lessons).
#pragma once

// The constant a of PrepareGrad (optimizer_formulas.h): the clip scale read from device memory
// (1 without one) times the gradient multiplier, for kScaled; the multiplier, for kClamped (b is
// the clip value). Note [Clipping folded into the update], Note [Data parallelism folded into
// the update].
template <GradMode M, typename T>
__device__ __forceinline__ T GradA(const double* scale, double mult) {
  return M == GradMode::kScaled && scale ? T(*scale * mult) : T(mult);
}

// skip: the found_inf flag (Note [Skipped updates] in core/ops/optimizer.cc), or null; read on the
// device, so a recorded device graph sees every step's value.
// copy: the update's 16-bit copy of the parameter, or null (Note [bfloat16 weight copies kept by
// the update] in graph/weight_copies.cc): the new value as the cast op's kernel rounds it.
template <typename T>
__device__ __forceinline__ void WriteCopy(uint16_t* copy, int copy_bf16, int64_t i, T v) {
  if (copy) copy[i] = DevCastTo16(double(v), copy_bf16 != 0);
}

// One element of SGD's update, for SgdKernel and the grouped updates alike.
template <typename T, GradMode M>
__device__ __forceinline__ void SgdElement(T* p, const T* g, T* buf, int64_t i, T tlr, T ga, T gb, T wd, T mom,
                                           T one_minus_damp, int nesterov, uint16_t* copy, int copy_bf16) {
  if (!buf) {
    p[i] -= tlr * (PrepareGrad<M>(g[i], ga, gb) + wd * p[i]);
  } else {
    T d = PrepareGrad<M>(g[i], ga, gb) + wd * p[i];
    T v = mom * buf[i] + one_minus_damp * d;
    buf[i] = v;
    p[i] -= nesterov ? tlr * (d + mom * v) : tlr * v;
  }
  WriteCopy(copy, copy_bf16, i, p[i]);
}

template <typename T, GradMode M>
__global__ void SgdKernel(T* p, const T* g, T* buf, const double* lr, int64_t n, T wd, T mom, T one_minus_damp,
                          int nesterov, const double* scale, double mult, double clip, const float* skip,
                          uint16_t* copy, int copy_bf16) {
  if (skip && *skip != 0.0f) return;
  const T tlr = T(*lr);
  const T ga = GradA<M, T>(scale, mult), gb = T(clip);
  LOOM_GRID_STRIDE(i, n) { SgdElement<T, M>(p, g, buf, i, tlr, ga, gb, wd, mom, one_minus_damp, nesterov, copy, copy_bf16); }
}

// Adam's per-step constants, from the device-side learning rate and step count: computed once
// per block, in double, exactly as the CPU kernel computes them.
template <typename T>
struct AdamStep {
  T step_size, inv_sqrt_c2, decay;
};
template <typename T>
__device__ __forceinline__ AdamStep<T> AdamStepOf(const double* lr_p, const double* step_p, double b1, double b2,
                                                  double wd) {
  const double lr = *lr_p, step = *step_p;
  const double c1 = 1 - pow(b1, step), c2 = 1 - pow(b2, step);
  return AdamStep<T>{T(lr / c1), T(1 / sqrt(c2)), T(1 - lr * wd)};
}

// One element of Adam's update, for AdamKernel and the grouped updates alike.
template <typename T, GradMode M>
__device__ __forceinline__ void AdamElement(T* p, const T* g, T* m, T* v, int64_t i, const AdamStep<T>& st, T tb1,
                                            T tb2, T teps, T twd, int decoupled, T ga, T gb, uint16_t* copy,
                                            int copy_bf16) {
  const T gt = PrepareGrad<M>(g[i], ga, gb);
  T gi = decoupled ? gt : gt + twd * p[i];
  if (decoupled) p[i] *= st.decay;
  T mi = tb1 * m[i] + (T(1) - tb1) * gi;
  T vi = tb2 * v[i] + (T(1) - tb2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  p[i] -= st.step_size * mi / (Sqrt(vi) * st.inv_sqrt_c2 + teps);
  WriteCopy(copy, copy_bf16, i, p[i]);
}

template <typename T, GradMode M>
__global__ void AdamKernel(T* p, const T* g, T* m, T* v, const double* lr_p, const double* step_p, int64_t n,
                           double b1, double b2, double eps, double wd, int decoupled, const double* scale,
                           double mult, double clip, const float* skip, uint16_t* copy, int copy_bf16) {
  if (skip && *skip != 0.0f) return;  // every thread of every block alike: before __syncthreads
  __shared__ AdamStep<T> st;
  if (threadIdx.x == 0) st = AdamStepOf<T>(lr_p, step_p, b1, b2, wd);
  __syncthreads();
  const T ga = GradA<M, T>(scale, mult), gb = T(clip);
  LOOM_GRID_STRIDE(i, n) {
    AdamElement<T, M>(p, g, m, v, i, st, T(b1), T(b2), T(eps), T(wd), decoupled, ga, gb, copy, copy_bf16);
  }
}

// ---- Note [Small updates grouped] (graph/group_updates.cc): one launch for up to kGroupTable
// members of an update_group, each with its own pointers; member k gets GroupBlocks(n_k)
// blocks and each element the arithmetic of its own record's kernel (SgdElement, AdamElement).
constexpr int kGroupTable = 24;        // members per launch (the table is a kernel parameter, ~2.5 KB)
constexpr int64_t kGroupBlocks = 256;  // at most, per member

inline int64_t GroupBlocks(int64_t n) { return std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kGroupBlocks); }

struct GroupTable {
  void* p[kGroupTable];
  const void* g[kGroupTable];
  void* s1[kGroupTable];  // SGD's momentum buffer (or null), Adam's m
  void* s2[kGroupTable];  // Adam's v
  uint16_t* copy[kGroupTable];
  const double* lr[kGroupTable];
  const double* step[kGroupTable];  // Adam's
  const double* scale[kGroupTable];
  const float* skip[kGroupTable];
  int64_t n[kGroupTable];
  int64_t first_block[kGroupTable + 1];
  int count = 0;
};

// One member's tensors (device addresses): parameter, gradient, state (SGD's momentum buffer or
// null, Adam's m; Adam's v), the 16-bit copy or null, learning rate, Adam's step count, the clip
// scale and found_inf flag or null; and its element count (> 0).
struct GroupEntry {
  void* p;
  const void* g;
  void *s1, *s2;
  uint16_t* copy;
  const double *lr, *step, *scale;
  const float* skip;
  int64_t n;
};
// Appends e to t (t.count < kGroupTable), its GroupBlocks(e.n) blocks after the last member's.
inline void AddGroupMember(GroupTable& t, const GroupEntry& e) {
  if (t.count == 0) t.first_block[0] = 0;
  const int j = t.count++;
  t.p[j] = e.p;
  t.g[j] = e.g;
  t.s1[j] = e.s1;
  t.s2[j] = e.s2;
  t.copy[j] = e.copy;
  t.lr[j] = e.lr;
  t.step[j] = e.step;
  t.scale[j] = e.scale;
  t.skip[j] = e.skip;
  t.n[j] = e.n;
  t.first_block[j + 1] = t.first_block[j] + GroupBlocks(e.n);
}

// The member of block blockIdx.x, and the block's place among that member's blocks.
__device__ __forceinline__ int GroupMember(const GroupTable& t, int64_t& b, int64_t& step) {
  int k = 0;
  while (int64_t(blockIdx.x) >= t.first_block[k + 1]) ++k;
  b = int64_t(blockIdx.x) - t.first_block[k];
  step = (t.first_block[k + 1] - t.first_block[k]) * int64_t(blockDim.x);
  return k;
}

template <typename T, GradMode M>
__global__ void SgdGroupKernel(GroupTable t, double wd, double mom, double damp, int nesterov, double mult,
                               double clip, int copy_bf16) {
  int64_t b, step;
  const int k = GroupMember(t, b, step);
  if (t.skip[k] && *t.skip[k] != 0.0f) return;
  T *p = static_cast<T*>(t.p[k]), *buf = static_cast<T*>(t.s1[k]);
  const T* g = static_cast<const T*>(t.g[k]);
  const T tlr = T(*t.lr[k]), ga = GradA<M, T>(t.scale[k], mult), gb = T(clip);
  for (int64_t i = b * int64_t(blockDim.x) + threadIdx.x; i < t.n[k]; i += step)
    SgdElement<T, M>(p, g, buf, i, tlr, ga, gb, T(wd), T(mom), T(1 - damp), nesterov, t.copy[k], copy_bf16);
}

template <typename T, GradMode M>
__global__ void AdamGroupKernel(GroupTable t, double b1, double b2, double eps, double wd, int decoupled, double mult,
                                double clip, int copy_bf16) {
  int64_t b, step;
  const int k = GroupMember(t, b, step);
  if (t.skip[k] && *t.skip[k] != 0.0f) return;  // every thread of the block alike: before __syncthreads
  __shared__ AdamStep<T> st;
  if (threadIdx.x == 0) st = AdamStepOf<T>(t.lr[k], t.step[k], b1, b2, wd);
  __syncthreads();
  T *p = static_cast<T*>(t.p[k]), *m = static_cast<T*>(t.s1[k]), *v = static_cast<T*>(t.s2[k]);
  const T* g = static_cast<const T*>(t.g[k]);
  const T ga = GradA<M, T>(t.scale[k], mult), gb = T(clip);
  for (int64_t i = b * int64_t(blockDim.x) + threadIdx.x; i < t.n[k]; i += step)
    AdamElement<T, M>(p, g, m, v, i, st, T(b1), T(b2), T(eps), T(wd), decoupled, ga, gb, t.copy[k], copy_bf16);
}
