// Jagged <-> padded conversion in CUDA C++ (the torch extension genrec_kernels_cuda; binding in jagged.cpp).
// Element-type agnostic: rows are copied as 1/2/4/8-byte words. Plain CUDA runtime only (no torch headers), so
// `nvcc -c jagged.cu` checks this file on a machine without a GPU.
#include <cstdint>
#include <cstring>

#include <cuda_runtime.h>

namespace {

constexpr int kThreads = 256;

// padded[b, l, d] = values[offsets[b] + l, d] for l < n_b, else pad. One thread per padded element.
template <typename T>
__global__ void jagged_to_padded_kernel(const T* __restrict__ values, const int64_t* __restrict__ offsets,
                                        T* __restrict__ padded, int64_t batch, int64_t max_len, int64_t dim, T pad) {
  const int64_t total = batch * max_len * dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = i % dim, row = i / dim, l = row % max_len, b = row / max_len;
    const int64_t start = offsets[b];
    padded[i] = l < offsets[b + 1] - start ? values[(start + l) * dim + d] : pad;
  }
}

// values[r, d] = padded[b, r - offsets[b], d] with b the sequence of row r (binary search in offsets).
template <typename T>
__global__ void padded_to_jagged_kernel(const T* __restrict__ padded, const int64_t* __restrict__ offsets,
                                        T* __restrict__ values, int64_t batch, int64_t max_len, int64_t dim,
                                        int64_t rows) {
  const int64_t total = rows * dim;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = i % dim, r = i / dim;
    int64_t lo = 0, hi = batch;  // the last b with offsets[b] <= r
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      if (offsets[mid] <= r) lo = mid; else hi = mid;
    }
    values[i] = padded[(lo * max_len + r - offsets[lo]) * dim + d];
  }
}

unsigned int blocks_for(int64_t total) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  return (unsigned int)(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

template <typename T>
const char* launch_j2p(const void* values, const int64_t* offsets, void* padded, int64_t batch, int64_t max_len,
                       int64_t dim, uint64_t pad_bits, cudaStream_t stream) {
  T pad;
  static_assert(sizeof(T) <= sizeof(uint64_t), "word size");
  memcpy(&pad, &pad_bits, sizeof(T));  // the low bytes (little endian)
  jagged_to_padded_kernel<T><<<blocks_for(batch * max_len * dim), kThreads, 0, stream>>>(
      static_cast<const T*>(values), offsets, static_cast<T*>(padded), batch, max_len, dim, pad);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

template <typename T>
const char* launch_p2j(const void* padded, const int64_t* offsets, void* values, int64_t batch, int64_t max_len,
                       int64_t dim, int64_t rows, cudaStream_t stream) {
  padded_to_jagged_kernel<T><<<blocks_for(rows * dim), kThreads, 0, stream>>>(
      static_cast<const T*>(padded), offsets, static_cast<T*>(values), batch, max_len, dim, rows);
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

// Entry points for jagged.cpp: element_size in bytes (1, 2, 4 or 8); stream a cudaStream_t as an integer.
// Return nullptr on success, else the CUDA error message.
const char* genrec_jagged_to_padded(const void* values, const int64_t* offsets, void* padded, int64_t batch,
                                    int64_t max_len, int64_t dim, int element_size, uint64_t pad_bits,
                                    int64_t stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (element_size) {
    case 1: return launch_j2p<uint8_t>(values, offsets, padded, batch, max_len, dim, pad_bits, s);
    case 2: return launch_j2p<uint16_t>(values, offsets, padded, batch, max_len, dim, pad_bits, s);
    case 4: return launch_j2p<uint32_t>(values, offsets, padded, batch, max_len, dim, pad_bits, s);
    case 8: return launch_j2p<uint64_t>(values, offsets, padded, batch, max_len, dim, pad_bits, s);
    default: return "unsupported element size";
  }
}

const char* genrec_padded_to_jagged(const void* padded, const int64_t* offsets, void* values, int64_t batch,
                                    int64_t max_len, int64_t dim, int64_t rows, int element_size, int64_t stream) {
  auto s = reinterpret_cast<cudaStream_t>(stream);
  switch (element_size) {
    case 1: return launch_p2j<uint8_t>(padded, offsets, values, batch, max_len, dim, rows, s);
    case 2: return launch_p2j<uint16_t>(padded, offsets, values, batch, max_len, dim, rows, s);
    case 4: return launch_p2j<uint32_t>(padded, offsets, values, batch, max_len, dim, rows, s);
    case 8: return launch_p2j<uint64_t>(padded, offsets, values, batch, max_len, dim, rows, s);
    default: return "unsupported element size";
  }
}
