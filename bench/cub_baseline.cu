// CUB / memcpy baseline for detkit benchmarks.
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -o cub_baseline cub_baseline.cu
// Usage: cub_baseline [--sizes 20,22,24,26,28] [--reps 30] [--sort-only]   (sizes are log2 of element count)
//   --sort-only: the copy and the radix-sort rows only (e.g. --sizes 10,12,14,16,18,20,22,24,26,28)
// Output (stdout, CSV): impl,primitive,n,median_ms,gbps,gitems   plus a "# device: NAME" comment line.
#include <cub/cub.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(call)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "CUDA error at %s:%d: %s (%s)\n", __FILE__, __LINE__, #call,    \
              cudaGetErrorString(e_));                                                \
      exit(2);                                                                        \
    }                                                                                 \
  } while (0)

// ---- input generation (bit-exact with the Rust host generator) ----
__host__ __device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

enum Kind { SCAN = 0, HIST_UNIFORM = 1, HIST_SKEWED = 2, SELECT = 3 };

__host__ __device__ inline uint32_t gen_value(int kind, uint64_t i) {
  const uint64_t seed = kind == SCAN ? 1 : (kind == SELECT ? 3 : 2);
  const uint64_t r = splitmix64(seed * 0x100000000ull + i);
  switch (kind) {
    case SCAN:
    case HIST_UNIFORM: return (uint32_t)(r & 0xFF);
    case HIST_SKEWED: return ((r >> 32) % 5 != 0) ? (uint32_t)(r & 7) : (uint32_t)(r & 0xFF);
    default: return (uint32_t)(r >> 32);  // SELECT
  }
}

__global__ void gen_kernel(uint32_t* out, size_t n, int kind) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = gen_value(kind, i);
}

static void generate(uint32_t* d, size_t n, int kind) {
  gen_kernel<<<1024, 256>>>(d, n, kind);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
}

struct SelectLow {  // ~50% of select values
  __host__ __device__ bool operator()(const uint32_t& x) const { return x < 0x80000000u; }
};

// ---- timing / reporting ----
static int g_reps = 30;
static cudaEvent_t g_ev0, g_ev1;

template <class F>
static float median_ms(F&& launch) {
  for (int i = 0; i < 5; ++i) launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> t(g_reps);
  for (int r = 0; r < g_reps; ++r) {
    CK(cudaEventRecord(g_ev0));
    launch();
    CK(cudaEventRecord(g_ev1));
    CK(cudaEventSynchronize(g_ev1));
    CK(cudaEventElapsedTime(&t[r], g_ev0, g_ev1));
  }
  std::sort(t.begin(), t.end());
  return (g_reps % 2) ? t[g_reps / 2] : 0.5f * (t[g_reps / 2 - 1] + t[g_reps / 2]);
}

static void report(const char* impl, const char* prim, size_t n, float ms, double bytes) {
  const double s = ms * 1e-3;
  printf("%s,%s,%zu,%.6f,%.3f,%.4f\n", impl, prim, n, ms, bytes / s / 1e9, (double)n / s / 1e9);
  fflush(stdout);
}

static void fail(const char* prim, size_t n) {
  printf("CHECK FAILED %s %zu\n", prim, n);
  fflush(stdout);
  exit(1);
}

static void* alloc_temp(size_t bytes) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  return p;
}

// ---- benchmarks (d_in/d_out hold n u32 each) ----
static void bench_copy(uint32_t* d_in, uint32_t* d_out, size_t n) {
  generate(d_in, n, SCAN);
  float ms = median_ms([&] {
    CK(cudaMemcpyAsync(d_out, d_in, n * sizeof(uint32_t), cudaMemcpyDeviceToDevice, 0));
  });
  report("copy", "copy", n, ms, 8.0 * n);
}

static void bench_scan(uint32_t* d_in, uint32_t* d_out, size_t n) {
  const int ni = (int)n;
  generate(d_in, n, SCAN);
  size_t tb = 0;
  CK(cub::DeviceScan::ExclusiveSum(nullptr, tb, d_in, d_out, ni));
  void* tmp = alloc_temp(tb);
  CK(cub::DeviceScan::ExclusiveSum(tmp, tb, d_in, d_out, ni));
  CK(cudaDeviceSynchronize());
  std::vector<uint32_t> h(n);
  CK(cudaMemcpy(h.data(), d_out, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  uint32_t acc = 0;
  for (size_t i = 0; i < n; ++i) {
    if (h[i] != acc) fail("scan_u32", n);
    acc += gen_value(SCAN, i);
  }
  float ms = median_ms([&] { CK(cub::DeviceScan::ExclusiveSum(tmp, tb, d_in, d_out, ni)); });
  report("cub", "scan_u32", n, ms, 8.0 * n);
  CK(cudaFree(tmp));
}

static void bench_hist(uint32_t* d_in, unsigned* d_hist, size_t n, int kind) {
  const char* prim = kind == HIST_UNIFORM ? "histogram_uniform" : "histogram_skewed";
  const int ni = (int)n;
  generate(d_in, n, kind);
  size_t tb = 0;
  CK(cub::DeviceHistogram::HistogramEven(nullptr, tb, d_in, d_hist, 257, 0u, 256u, ni));
  void* tmp = alloc_temp(tb);
  CK(cub::DeviceHistogram::HistogramEven(tmp, tb, d_in, d_hist, 257, 0u, 256u, ni));
  CK(cudaDeviceSynchronize());
  unsigned got[256];
  CK(cudaMemcpy(got, d_hist, sizeof(got), cudaMemcpyDeviceToHost));
  std::vector<unsigned> want(256, 0);
  for (size_t i = 0; i < n; ++i) want[gen_value(kind, i)]++;
  for (int b = 0; b < 256; ++b)
    if (got[b] != want[b]) fail(prim, n);
  float ms = median_ms([&] {
    CK(cub::DeviceHistogram::HistogramEven(tmp, tb, d_in, d_hist, 257, 0u, 256u, ni));
  });
  report("cub", prim, n, ms, 4.0 * n);
  CK(cudaFree(tmp));
}

static void bench_select(uint32_t* d_in, uint32_t* d_out, int* d_nsel, size_t n) {
  const int ni = (int)n;
  generate(d_in, n, SELECT);
  size_t tb = 0;
  CK(cub::DeviceSelect::If(nullptr, tb, d_in, d_out, d_nsel, ni, SelectLow{}));
  void* tmp = alloc_temp(tb);
  CK(cub::DeviceSelect::If(tmp, tb, d_in, d_out, d_nsel, ni, SelectLow{}));
  CK(cudaDeviceSynchronize());
  // host reference: count, first and last selected element
  size_t cnt = 0;
  uint32_t first = 0, last = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t v = gen_value(SELECT, i);
    if (SelectLow{}(v)) {
      if (cnt == 0) first = v;
      last = v;
      ++cnt;
    }
  }
  int got_cnt = -1;
  CK(cudaMemcpy(&got_cnt, d_nsel, sizeof(int), cudaMemcpyDeviceToHost));
  if (got_cnt < 0 || (size_t)got_cnt != cnt) fail("select_50", n);
  if (cnt > 0) {
    uint32_t gf = 0, gl = 0;
    CK(cudaMemcpy(&gf, d_out, sizeof(uint32_t), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&gl, d_out + (cnt - 1), sizeof(uint32_t), cudaMemcpyDeviceToHost));
    if (gf != first || gl != last) fail("select_50", n);
  }
  float ms = median_ms([&] { CK(cub::DeviceSelect::If(tmp, tb, d_in, d_out, d_nsel, ni, SelectLow{})); });
  report("cub", "select_50", n, ms, 4.0 * n + 4.0 * cnt);
  CK(cudaFree(tmp));
}

// ---- radix sort (keys from the hash streams of detkit::sort::gen: u32 keys = high word of
// stream 5, u64 keys = stream 6, 48-bit keys = stream 6 & (2^48 - 1); values = input index) ----
__host__ __device__ inline uint32_t sort_key_u32(uint64_t i) {
  return (uint32_t)(splitmix64((5ull << 32) + i) >> 32);
}
__host__ __device__ inline uint64_t sort_key_u64(uint64_t i, bool b48) {
  const uint64_t r = splitmix64((6ull << 32) + i);
  return b48 ? (r & ((1ull << 48) - 1)) : r;
}

template <class K>
__global__ void gen_sort_kernel(K* keys, uint32_t* vals, size_t n, int mode) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    keys[i] = mode == 0 ? (K)sort_key_u32(i) : (K)sort_key_u64(i, mode == 2);
    if (vals) vals[i] = (uint32_t)i;
  }
}

// Exact O(n) check of a stable pair sort whose values were the input indices: the values
// are a permutation, key_out[i] is the key of input value[i], (key, value) increases.
template <class K, class G>
static bool check_pairs(const std::vector<K>& k, const std::vector<uint32_t>& v, size_t n, G gen) {
  std::vector<char> seen(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (v[i] >= n || seen[v[i]] || k[i] != gen(v[i])) return false;
    seen[v[i]] = 1;
    if (i > 0 && (k[i - 1] > k[i] || (k[i - 1] == k[i] && v[i - 1] > v[i]))) return false;
  }
  return true;
}

template <class K>
static void bench_sort_pairs(size_t n, int mode, const char* prim) {
  const int ni = (int)n;
  const int end_bit = mode == 0 ? 32 : (mode == 2 ? 48 : 64);
  K *d_ki = nullptr, *d_ko = nullptr;
  uint32_t *d_vi = nullptr, *d_vo = nullptr;
  CK(cudaMalloc(&d_ki, n * sizeof(K)));
  CK(cudaMalloc(&d_ko, n * sizeof(K)));
  CK(cudaMalloc(&d_vi, n * sizeof(uint32_t)));
  CK(cudaMalloc(&d_vo, n * sizeof(uint32_t)));
  gen_sort_kernel<K><<<1024, 256>>>(d_ki, d_vi, n, mode);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  size_t tb = 0;
  CK(cub::DeviceRadixSort::SortPairs(nullptr, tb, d_ki, d_ko, d_vi, d_vo, ni, 0, end_bit));
  void* tmp = alloc_temp(tb);
  CK(cub::DeviceRadixSort::SortPairs(tmp, tb, d_ki, d_ko, d_vi, d_vo, ni, 0, end_bit));
  CK(cudaDeviceSynchronize());
  std::vector<K> hk(n);
  std::vector<uint32_t> hv(n);
  CK(cudaMemcpy(hk.data(), d_ko, n * sizeof(K), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hv.data(), d_vo, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  const bool ok = check_pairs(hk, hv, n, [&](uint64_t i) {
    return mode == 0 ? (K)sort_key_u32(i) : (K)sort_key_u64(i, mode == 2);
  });
  if (!ok) fail(prim, n);
  float ms = median_ms([&] {
    CK(cub::DeviceRadixSort::SortPairs(tmp, tb, d_ki, d_ko, d_vi, d_vo, ni, 0, end_bit));
  });
  report("cub", prim, n, ms, 2.0 * n * (sizeof(K) + sizeof(uint32_t)));
  CK(cudaFree(tmp));
  CK(cudaFree(d_ki));
  CK(cudaFree(d_ko));
  CK(cudaFree(d_vi));
  CK(cudaFree(d_vo));
}

static void bench_sort_keys_u32(size_t n) {
  const int ni = (int)n;
  uint32_t *d_ki = nullptr, *d_ko = nullptr;
  CK(cudaMalloc(&d_ki, n * sizeof(uint32_t)));
  CK(cudaMalloc(&d_ko, n * sizeof(uint32_t)));
  gen_sort_kernel<uint32_t><<<1024, 256>>>(d_ki, nullptr, n, 0);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  size_t tb = 0;
  CK(cub::DeviceRadixSort::SortKeys(nullptr, tb, d_ki, d_ko, ni));
  void* tmp = alloc_temp(tb);
  CK(cub::DeviceRadixSort::SortKeys(tmp, tb, d_ki, d_ko, ni));
  CK(cudaDeviceSynchronize());
  // Non-decreasing, and the same multiset as the input (sum and xor of a hash of each key).
  std::vector<uint32_t> h(n);
  CK(cudaMemcpy(h.data(), d_ko, n * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  uint64_t sum_in = 0, sum_out = 0, x_in = 0, x_out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && h[i - 1] > h[i]) fail("sort_keys_u32", n);
    const uint64_t a = splitmix64(sort_key_u32(i)), b = splitmix64(h[i]);
    sum_in += a; x_in ^= a; sum_out += b; x_out ^= b;
  }
  if (sum_in != sum_out || x_in != x_out) fail("sort_keys_u32", n);
  float ms = median_ms([&] { CK(cub::DeviceRadixSort::SortKeys(tmp, tb, d_ki, d_ko, ni)); });
  report("cub", "sort_keys_u32", n, ms, 8.0 * n);
  CK(cudaFree(tmp));
  CK(cudaFree(d_ki));
  CK(cudaFree(d_ko));
}

static void bench_sort(size_t n) {
  bench_sort_pairs<uint64_t>(n, 1, "sort_pairs_u64_u32");
  bench_sort_pairs<uint64_t>(n, 2, "sort_pairs_u64b48_u32");
  bench_sort_pairs<uint32_t>(n, 0, "sort_pairs_u32_u32");
  bench_sort_keys_u32(n);
}

// ---- main ----
static void usage(const char* argv0) {
  fprintf(stderr, "usage: %s [--sizes 20,22,24,26,28] [--reps 30] [--sort-only]\n", argv0);
  exit(1);
}

int main(int argc, char** argv) {
  std::vector<int> sizes = {20, 22, 24, 26, 28};
  bool sort_only = false;
  for (int a = 1; a < argc; ++a) {
    if (!strcmp(argv[a], "--sizes") && a + 1 < argc) {
      sizes.clear();
      std::string s = argv[++a];
      size_t pos = 0;
      while (pos <= s.size()) {
        size_t c = s.find(',', pos);
        if (c == std::string::npos) c = s.size();
        if (c > pos) sizes.push_back(atoi(s.substr(pos, c - pos).c_str()));
        pos = c + 1;
      }
    } else if (!strcmp(argv[a], "--reps") && a + 1 < argc) {
      g_reps = atoi(argv[++a]);
    } else if (!strcmp(argv[a], "--sort-only")) {
      sort_only = true;
    } else {
      usage(argv[0]);
    }
  }
  if (sizes.empty() || g_reps < 1) usage(argv[0]);
  for (int k : sizes)
    if (k < 1 || k > 30) { fprintf(stderr, "size 2^%d out of range [1,30]\n", k); return 1; }

  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("impl,primitive,n,median_ms,gbps,gitems\n");
  printf("# device: %s\n", prop.name);
  fflush(stdout);
  CK(cudaEventCreate(&g_ev0));
  CK(cudaEventCreate(&g_ev1));

  for (int k : sizes) {
    const size_t n = size_t(1) << k;
    uint32_t *d_in = nullptr, *d_out = nullptr;
    unsigned* d_hist = nullptr;
    int* d_nsel = nullptr;
    CK(cudaMalloc(&d_in, n * sizeof(uint32_t)));
    CK(cudaMalloc(&d_out, n * sizeof(uint32_t)));
    CK(cudaMalloc(&d_hist, 256 * sizeof(unsigned)));
    CK(cudaMalloc(&d_nsel, sizeof(int)));

    bench_copy(d_in, d_out, n);
    bench_sort(n);
    if (!sort_only) {
    bench_scan(d_in, d_out, n);
    bench_hist(d_in, d_hist, n, HIST_UNIFORM);
    bench_hist(d_in, d_hist, n, HIST_SKEWED);
    bench_select(d_in, d_out, d_nsel, n);
    }

    CK(cudaFree(d_in));
    CK(cudaFree(d_out));
    CK(cudaFree(d_hist));
    CK(cudaFree(d_nsel));
  }
  CK(cudaEventDestroy(g_ev0));
  CK(cudaEventDestroy(g_ev1));
  return 0;
}
