// CUB baseline for the PET sort benchmark (bench-pet compiles and runs it when nvcc is present).
// Usage: pet_cub REPS FILE...   each FILE: "LABEL" name encoded in the file name, raw u64 keys
// (the f64 bit patterns of non-negative times: their u64 order is the time order).
// Sorts (key, u32 index) pairs with cub::DeviceRadixSort::SortPairs (64 key bits) and
// cub::DeviceMergeSort::SortPairs, checks the keys are sorted, prints
// "cub,<algo>,<file>,<n>,<median ms>".
#include <cub/cub.cuh>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { fprintf(stderr, "CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(2); } } while (0)

struct Less { __device__ bool operator()(const uint64_t& a, const uint64_t& b) const { return a < b; } };

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
    CK(cudaDeviceSynchronize());
    std::vector<uint64_t> r1(n), r2(n);
    CK(cudaMemcpy(r1.data(), k1, n * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(r2.data(), k2, n * 8, cudaMemcpyDeviceToHost));
    bool ok = std::is_sorted(r1.begin(), r1.end()) && std::is_sorted(r2.begin(), r2.end());
    if (!ok) { printf("CHECK FAILED %s\n", argv[f]); return 1; }
    printf("cub,radix,%s,%zu,%.6f\n", argv[f], n, radix);
    printf("cub,merge,%s,%zu,%.6f\n", argv[f], n, merge);
    fflush(stdout);
    cudaFree(k0); cudaFree(k1); cudaFree(k2); cudaFree(v0); cudaFree(v1); cudaFree(v2); cudaFree(tmp);
  }
  return 0;
}
