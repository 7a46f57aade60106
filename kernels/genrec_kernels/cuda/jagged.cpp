// Torch binding of jagged.cu: checks, output allocation, and the launch on the caller's CUDA stream.
#include <torch/extension.h>

#include <cstdint>

const char* genrec_jagged_to_padded(const void* values, const int64_t* offsets, void* padded, int64_t batch,
                                    int64_t max_len, int64_t dim, int element_size, uint64_t pad_bits,
                                    int64_t stream);
const char* genrec_padded_to_jagged(const void* padded, const int64_t* offsets, void* values, int64_t batch,
                                    int64_t max_len, int64_t dim, int64_t rows, int element_size, int64_t stream);

namespace {

void check(const torch::Tensor& data, const torch::Tensor& offsets, int64_t dims) {
  TORCH_CHECK(data.is_cuda() && offsets.is_cuda() && data.device() == offsets.device(),
              "genrec_kernels_cuda: tensors must be on one CUDA device");
  TORCH_CHECK(data.dim() == dims && data.is_contiguous(), "genrec_kernels_cuda: expected a contiguous ", dims,
              "-d tensor, got shape ", data.sizes());
  TORCH_CHECK(offsets.scalar_type() == torch::kLong && offsets.dim() == 1 && offsets.is_contiguous(),
              "genrec_kernels_cuda: offsets must be a contiguous 1-d int64 tensor");
}

}  // namespace

// values (N, D), offsets (B + 1,) -> (B, max_len, D); pad_bits: the pad value's bit pattern in values' dtype.
torch::Tensor jagged_to_padded(const torch::Tensor& values, const torch::Tensor& offsets, int64_t max_len,
                               int64_t pad_bits, int64_t stream) {
  check(values, offsets, 2);
  const int64_t batch = offsets.size(0) - 1, dim = values.size(1);
  auto padded = torch::empty({batch, max_len, dim}, values.options());
  const char* err = genrec_jagged_to_padded(values.data_ptr(), offsets.data_ptr<int64_t>(), padded.data_ptr(),
                                            batch, max_len, dim, (int)values.element_size(), (uint64_t)pad_bits,
                                            stream);
  TORCH_CHECK(err == nullptr, "genrec_kernels_cuda jagged_to_padded: ", err);
  return padded;
}

// padded (B, L, D), offsets (B + 1,) -> (rows, D) with rows = offsets[B].
torch::Tensor padded_to_jagged(const torch::Tensor& padded, const torch::Tensor& offsets, int64_t rows,
                               int64_t stream) {
  check(padded, offsets, 3);
  auto values = torch::empty({rows, padded.size(2)}, padded.options());
  const char* err = genrec_padded_to_jagged(padded.data_ptr(), offsets.data_ptr<int64_t>(), values.data_ptr(),
                                            offsets.size(0) - 1, padded.size(1), padded.size(2), rows,
                                            (int)padded.element_size(), stream);
  TORCH_CHECK(err == nullptr, "genrec_kernels_cuda padded_to_jagged: ", err);
  return values;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("jagged_to_padded", &jagged_to_padded, "jagged (N, D) -> padded (B, max_len, D)");
  m.def("padded_to_jagged", &padded_to_jagged, "padded (B, L, D) -> jagged (rows, D)");
}
