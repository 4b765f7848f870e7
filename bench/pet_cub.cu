// CUB baseline for the PET sort benchmark (bench-pet compiles and runs it when nvcc is present).
// Usage: pet_cub REPS FILE...   each FILE: "LABEL" name encoded in the file name, raw u64 keys
// (the f64 bit patterns of non-negative times: their u64 order is the time order).
// Sorts (key, u32 index) pairs with cub::DeviceRadixSort::SortPairs (64 key bits) and
// cub::DeviceMergeSort::SortPairs, and the time to sorted singles (SortPairs + one gather of
// 16-byte singles; also with u32 offset keys when the times are integers spanning < 2^32),
// checks the keys are sorted, prints
// "cub,<algo>,<file>,<n>,<median ms>".
#include <cub/cub.cuh>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(2); } } while (0)

struct Less { __device__ bool operator()(const uint64_t& a, const uint64_t& b) const { return a < b; } };

// The 16-byte singles gathered through the sorted indices (what a user does after an argsort).
__global__ void gather16(const uint4* in, const uint32_t* idx, uint4* out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = in[idx[i]];
}

__global__ void iota(uint32_t* v, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) v[i] = (uint32_t)i;
}

template <class F> float median(int reps, F f) {
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> t(reps);
  for (int r = 0; r < reps; ++r) { CK(cudaEventRecord(a)); f(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b)); CK(cudaEventElapsedTime(&t[r], a, b)); }
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

int main(int argc, char** argv) {
  int reps = atoi(argv[1]);
  for (int f = 2; f < argc; ++f) {
    FILE* fp = fopen(argv[f], "rb"); if (!fp) { fprintf(stderr, "open %s\n", argv[f]); return 2; }
    fseek(fp, 0, SEEK_END); size_t n = ftell(fp) / 8; fseek(fp, 0, SEEK_SET);
    std::vector<uint64_t> h(n); if (fread(h.data(), 8, n, fp) != n) return 2; fclose(fp);
    uint64_t *k0, *k1, *k2; uint32_t *v0, *v1, *v2;
    CK(cudaMalloc(&k0, n * 8)); CK(cudaMalloc(&k1, n * 8)); CK(cudaMalloc(&k2, n * 8));
    CK(cudaMalloc(&v0, n * 4)); CK(cudaMalloc(&v1, n * 4)); CK(cudaMalloc(&v2, n * 4));
    CK(cudaMemcpy(k0, h.data(), n * 8, cudaMemcpyHostToDevice));
    iota<<<1024, 256>>>(v0, n); CK(cudaDeviceSynchronize());
    size_t tb = 0, tm = 0; void* tmp = nullptr;
    CK(cub::DeviceRadixSort::SortPairs(nullptr, tb, k0, k1, v0, v1, n));
    CK(cub::DeviceMergeSort::SortPairsCopy(nullptr, tm, k0, v0, k2, v2, n, Less()));
    CK(cudaMalloc(&tmp, std::max(tb, tm)));
    float radix = median(reps, [&] { CK(cub::DeviceRadixSort::SortPairs(tmp, tb, k0, k1, v0, v1, n)); });
    float merge = median(reps, [&] { CK(cub::DeviceMergeSort::SortPairsCopy(tmp, tm, k0, v0, k2, v2, n, Less())); });
    // Time to sorted singles: SortPairs, then one gather of the 16-byte singles.
    uint4 *s0, *s1; CK(cudaMalloc(&s0, n * 16)); CK(cudaMalloc(&s1, n * 16));
    CK(cudaMemset(s0, 0, n * 16));
    int gb = (int)std::min<size_t>((n + 255) / 256, 132 * 8);
    float radix_gather = median(reps, [&] {
      CK(cub::DeviceRadixSort::SortPairs(tmp, tb, k0, k1, v0, v1, n));
      gather16<<<gb, 256>>>(s0, v1, s1, n);
    });
    // The same with the keys a careful CUB user would pick for integer ticks: u32 offsets from
    // the smallest time when the times are integers spanning less than 2^32 (else not run).
    double lo = 1e300, hi = -1e300; bool integral = true;
    for (size_t i = 0; i < n; ++i) { double t; memcpy(&t, &h[i], 8); lo = std::min(lo, t); hi = std::max(hi, t); integral = integral && t == (double)(int64_t)t; }
    float radix32_gather = -1;
    if (n > 0 && integral && hi - lo < 4294967296.0) {
      std::vector<uint32_t> h32(n);
      for (size_t i = 0; i < n; ++i) { double t; memcpy(&t, &h[i], 8); h32[i] = (uint32_t)((int64_t)t - (int64_t)lo); }
      uint32_t *a32, *b32; CK(cudaMalloc(&a32, n * 4)); CK(cudaMalloc(&b32, n * 4));
      CK(cudaMemcpy(a32, h32.data(), n * 4, cudaMemcpyHostToDevice));
      size_t t32 = 0; void* tmp32 = nullptr;
      CK(cub::DeviceRadixSort::SortPairs(nullptr, t32, a32, b32, v0, v1, n));
      CK(cudaMalloc(&tmp32, t32));
      radix32_gather = median(reps, [&] {
        CK(cub::DeviceRadixSort::SortPairs(tmp32, t32, a32, b32, v0, v1, n));
        gather16<<<gb, 256>>>(s0, v1, s1, n);
      });
      std::vector<uint32_t> r32(n);
      CK(cudaMemcpy(r32.data(), b32, n * 4, cudaMemcpyDeviceToHost));
      if (!std::is_sorted(r32.begin(), r32.end())) { printf("CHECK FAILED %s (u32)\n", argv[f]); return 1; }
      cudaFree(a32); cudaFree(b32); cudaFree(tmp32);
    }
    cudaFree(s0); cudaFree(s1);
    // Restore the 64-bit sort's output for the check below.
    CK(cub::DeviceRadixSort::SortPairs(tmp, tb, k0, k1, v0, v1, n));
    CK(cudaDeviceSynchronize());
    std::vector<uint64_t> r1(n), r2(n);
    CK(cudaMemcpy(r1.data(), k1, n * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r2.data(), k2, n * 8, cudaMemcpyDeviceToHost));
    bool ok = std::is_sorted(r1.begin(), r1.end()) && std::is_sorted(r2.begin(), r2.end());
    if (!ok) { printf("CHECK FAILED %s\n", argv[f]); return 1; }
    printf("cub,radix,%s,%zu,%.6f\n", argv[f], n, radix);
    printf("cub,merge,%s,%zu,%.6f\n", argv[f], n, merge);
    printf("cub,radix+gather,%s,%zu,%.6f\n", argv[f], n, radix_gather);
    if (radix32_gather >= 0) printf("cub,radix u32 offsets+gather,%s,%zu,%.6f\n", argv[f], n, radix32_gather);
    fflush(stdout);
    cudaFree(k0); cudaFree(k1); cudaFree(k2); cudaFree(v0); cudaFree(v1); cudaFree(v2); cudaFree(tmp);
  }
  return 0;
}
