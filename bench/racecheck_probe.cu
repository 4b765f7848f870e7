// What compute-sanitizer costs per launch, and what host memory it holds (issue 28).
// Build and run on the GPU host:
//   nvcc -O2 -arch=sm_90 -o racecheck_probe bench/racecheck_probe.cu
//   compute-sanitizer --tool racecheck ./racecheck_probe     (and without the tool)
// Each row: a kernel of `threads` threads that writes and reads `smem` bytes of dynamic
// shared memory (a barrier between), on a grid of `grid` blocks, launched `launches` times,
// each launch followed by a synchronisation (as the GPU tests do: every result is read back);
// optionally a fresh cudaMalloc/cudaFree per launch. Printed: milliseconds per launch and
// the process's resident host memory (VmRSS, VmHWM) after the row.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

__global__ void touch(unsigned* out, unsigned words) {
  extern __shared__ unsigned s[];
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) s[i] = i ^ blockIdx.x;
  __syncthreads();
  unsigned acc = 0;
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) acc += s[(i + 1) % words];
  if (acc == 0xFFFFFFFFu) out[blockIdx.x] = acc;
}

static double field_gib(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  double v = -1;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, key, strlen(key))) { v = atof(line + strlen(key)) / (1024.0 * 1024.0); break; }
  }
  fclose(f);
  return v;
}

static void row(const char* name, unsigned grid, unsigned smem, int launches, bool alloc, unsigned* out) {
  auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < launches; k++) {
    unsigned* buf = nullptr;
    if (alloc) CK(cudaMalloc(&buf, 4 << 20));
    touch<<<grid, 256, smem>>>(alloc ? buf : out, smem / 4);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    if (alloc) CK(cudaFree(buf));
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  printf("%-34s grid %5u smem %6u launches %4d: %8.3f ms/launch, RSS %.2f GiB, peak %.2f GiB\n",
         name, grid, smem, launches, ms / launches, field_gib("VmRSS:"), field_gib("VmHWM:"));
  fflush(stdout);
}

int main(int argc, char** argv) {
  int scale = argc > 1 ? atoi(argv[1]) : 1;
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  CK(cudaFuncSetAttribute(touch, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  unsigned* out;
  CK(cudaMalloc(&out, 1 << 24));
  unsigned sms = p.multiProcessorCount;
  printf("%s, %u SMs; start RSS %.2f GiB\n", p.name, sms, field_gib("VmRSS:"));
  row("warm-up", 1, 1024, 2, false, out);
  row("grid = SMs, 16 KB", sms, 16384, 100 * scale, false, out);
  row("grid = SMs, 16 KB, again", sms, 16384, 100 * scale, false, out);
  row("grid = 8, 16 KB", 8, 16384, 100 * scale, false, out);
  row("grid = SMs, 1 KB", sms, 1024, 100 * scale, false, out);
  row("grid = 4 x SMs, 16 KB", 4 * sms, 16384, 50 * scale, false, out);
  row("grid = SMs, 96 KB", sms, 98304, 50 * scale, false, out);
  row("grid = 16 x SMs, 16 KB (not resident)", 16 * sms, 16384, 20 * scale, false, out);
  row("grid = SMs, 16 KB, malloc+free each", sms, 16384, 100 * scale, true, out);
  row("grid = 8, 1 KB, after all", 8, 1024, 100 * scale, false, out);
  return 0;
}
