// A demo library of gallery step 10.2, "Index inputs and value checks": two CPU
// operators that take an int64 index tensor, in the namespace opguide_index.
// It is not part of opguide._C (setup.py compiles only csrc/*.cpp); the page
// and tests/test_index_inputs.py build it with torch.utils.cpp_extension.load.
//
// * gather_rows(table, index): the rows of a 2-D table picked by an int64
//   index of any shape, so out[i, j, :] = table[index[i, j], :].
// * unique_indices(index): the distinct values of an int64 index, sorted. The
//   length of the output depends on the values, not only on the shapes.
//
// The metadata checks (dtype, dimensions, device) are repeated here because a
// kernel must not trust its caller. Only a kernel sees the index values, so
// the range check of each value lives here and nowhere else: a check in Python
// would read the values on the host, which waits for the device and breaks a
// torch.compile graph. TORCH_CHECK_INDEX raises IndexError in Python,
// TORCH_CHECK_TYPE TypeError, TORCH_CHECK_VALUE ValueError.
// The tensor type and the one factory this file calls, not ATen/ATen.h, which
// declares every ATen operator: the file compiles faster without them.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace opguide_index {

at::Tensor gather_rows(const at::Tensor& table, const at::Tensor& index) {
  TORCH_CHECK_VALUE(table.dim() == 2, "gather_rows: table must be 2-D (rows, columns), got ",
                    table.dim(), "-D");
  TORCH_CHECK_TYPE(index.scalar_type() == at::kLong, "gather_rows: index must be int64, got ",
                   index.scalar_type());
  TORCH_CHECK_VALUE(index.device() == table.device(), "gather_rows: index must be on ",
                    table.device(), " like table, got ", index.device());
  const int64_t num_rows = table.size(0), row_len = table.size(1);
  const at::Tensor table_c = table.contiguous();
  const at::Tensor index_c = index.contiguous();
  std::vector<int64_t> out_shape(index.sizes().begin(), index.sizes().end());
  out_shape.push_back(row_len);
  at::Tensor out = at::empty(out_shape, table.options());

  const int64_t* idx = index_c.const_data_ptr<int64_t>();
  const auto* src = static_cast<const char*>(table_c.const_data_ptr());
  auto* dst = static_cast<char*>(out.mutable_data_ptr());
  const int64_t row_bytes = row_len * table.element_size();
  for (int64_t k = 0; k < index.numel(); ++k) {
    const int64_t row = idx[k];
    // Negative values are refused rather than counted from the end, as
    // torch.nn.functional.embedding does.
    TORCH_CHECK_INDEX(row >= 0 && row < num_rows, "gather_rows: index value ", row,
                      " (element ", k, " of index) is out of range for a table of ", num_rows,
                      " rows (valid: 0 <= index < ", num_rows, ")");
    std::memcpy(dst + k * row_bytes, src + row * row_bytes, row_bytes);
  }
  return out;
}

at::Tensor unique_indices(const at::Tensor& index) {
  TORCH_CHECK_TYPE(index.scalar_type() == at::kLong, "unique_indices: index must be int64, got ",
                   index.scalar_type());
  const at::Tensor index_c = index.contiguous();
  const int64_t* idx = index_c.const_data_ptr<int64_t>();
  std::vector<int64_t> values(idx, idx + index.numel());
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  at::Tensor out = at::empty({static_cast<int64_t>(values.size())}, index.options());
  std::copy(values.begin(), values.end(), out.mutable_data_ptr<int64_t>());
  return out;
}

}  // namespace opguide_index

TORCH_LIBRARY(opguide_index, m) {
  m.def("gather_rows(Tensor table, Tensor index) -> Tensor");
  m.def("unique_indices(Tensor index) -> Tensor");
}

TORCH_LIBRARY_IMPL(opguide_index, CPU, m) {
  m.impl("gather_rows", &opguide_index::gather_rows);
  m.impl("unique_indices", &opguide_index::unique_indices);
}
