// Embedding lookup and its scatter-add backward, with repeated token ids.
#include <catch2/catch.hpp>

#include <vector>

#include "odc/kernels/embedding.h"
#include "unit/kernels/kernel_test_support.h"

using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

TEST_CASE("embedding forward copies the rows of the ids", "[kernels][embedding]") {
  const int vocab = 10, dim = 7;
  const std::vector<std::int32_t> ids = {3, 0, 9, 3};
  const auto table = random_vector<float>(vocab * dim, 1);
  std::vector<float> out(ids.size() * dim);
  embedding_forward<float>(ids.data(), table.data(), out.data(), std::int64_t(ids.size()), dim);
  for (std::size_t t = 0; t < ids.size(); ++t) {
    for (int i = 0; i < dim; ++i) CHECK(out[t * dim + i] == table[ids[t] * dim + i]);
  }
}

TEST_CASE("embedding backward adds each token's gradient into its row", "[kernels][embedding]") {
  const int vocab = 6, dim = 5;
  const std::vector<std::int32_t> ids = {2, 4, 2, 2, 0};
  const auto dout = random_vector(ids.size() * dim, 2);
  const auto dtable0 = random_vector(vocab * dim, 3);  // accumulates onto existing values
  auto dtable = dtable0;
  embedding_backward<double>(ids.data(), dout.data(), dtable.data(), std::int64_t(ids.size()), dim);
  // Naive reference: the gradient of sum(out * dout) w.r.t. table row v is the sum of dout over
  // the tokens with id v (the forward is linear in the table).
  auto ref = dtable0;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    for (int i = 0; i < dim; ++i) ref[ids[t] * dim + i] += dout[t * dim + i];
  }
  CHECK(max_abs_diff(dtable, ref) < 1e-15);
  // And against central finite differences of that loss in double.
  auto table = random_vector(vocab * dim, 4);
  auto loss = [&] {
    std::vector<double> out(ids.size() * dim);
    embedding_forward<double>(ids.data(), table.data(), out.data(), std::int64_t(ids.size()), dim);
    return dot(out, dout);
  };
  std::vector<double> grad(vocab * dim, 0.0);
  embedding_backward<double>(ids.data(), dout.data(), grad.data(), std::int64_t(ids.size()), dim);
  CHECK(gradient_error(grad, table, loss) < 1e-6);
  // Rows without tokens are untouched.
  for (int v : {1, 3, 5}) {
    for (int i = 0; i < dim; ++i) CHECK(dtable[v * dim + i] == dtable0[v * dim + i]);
  }
}
