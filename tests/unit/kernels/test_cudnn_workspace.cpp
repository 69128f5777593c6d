// The cuDNN backward's token bucket and workspace estimate (kernels/cudnn_ragged.h): the bucket
// the graph key carries and max_total_seq_len_q/kv is set from, and the estimate the memory plan
// counts up to the bound, against the sizes worked out by hand from the frontend's formulas.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "odc/kernels/cudnn_ragged.h"

using namespace odc::kernels;

TEST_CASE("cuDNN token bucket: the next power of two of the tokens, at most the padded view", "[cudnn_workspace]") {
  CHECK(cudnn_token_bucket(1, 1, 64) == 1);
  CHECK(cudnn_token_bucket(100, 4, 128) == 128);
  CHECK(cudnn_token_bucket(128, 4, 128) == 128);
  CHECK(cudnn_token_bucket(129, 4, 128) == 256);
  CHECK(cudnn_token_bucket(300, 4, 128) == 512);  // B x S = 512 holds it
  CHECK(cudnn_token_bucket(300, 3, 128) == 384);  // clamped to B x S
  // 64 sequences with the longest at 4,000 tokens: the padded view is 64 x 4096 = 262,144 tokens,
  // the bucket 8,192: what the per-token workspace is sized for instead.
  std::vector<std::int32_t> cu{0};
  for (int i = 0; i < 63; ++i) cu.push_back(cu.back() + 16);
  cu.push_back(cu.back() + 4000);
  const CudnnRaggedTables t = cudnn_ragged_tables(cu.data(), 64, 32, 8, 128);
  CHECK(t.b == 64);
  CHECK(t.s == 4096);
  CHECK(t.t == 8192);
  // Microbatches of other totals share the bucket: 63 x 62 + 4,000 = 7,906 tokens, as 5,008.
  std::vector<std::int32_t> other{0};
  for (int i = 0; i < 63; ++i) other.push_back(other.back() + 62);
  other.push_back(other.back() + 4000);
  CHECK(cudnn_ragged_tables(other.data(), 64, 32, 8, 128).t == t.t);
}

TEST_CASE("cuDNN backward workspace estimate: dP scratch at its worst class plus per-token tensors",
          "[cudnn_workspace]") {
  // 256 tokens, GQA 8/2, head_dim 64. The classes such a microbatch can fall in, dP = B*h*S*S'*2:
  //   S 64  (longest 1..64):    up to 256 sequences -> B 256: 256*8*64*128*2  = 33,554,432
  //   S 128 (longest 65..128):  up to 192 sequences -> B 256: 256*8*128*128*2 = 67,108,864
  //   S 256 (longest 129..256): up to 128 sequences -> B 128: 128*8*256*256*2 = 134,217,728
  // per token at the bucket 256: 8*4 (softmax sums) + 8*64*4*3 (dQ, full-head dK and dV) = 6,176.
  CHECK(cudnn_backward_workspace_estimate(256, 8, 2, 64) == 134217728 + 256 * 6176);
  // MHA has no full-head dK/dV: 8*4 + 8*64*4 per token.
  CHECK(cudnn_backward_workspace_estimate(256, 8, 8, 64) == 134217728 + 256 * 2080);
  // One token: one sequence of the smallest class (B 1, S 64, S' 128).
  CHECK(cudnn_backward_workspace_estimate(1, 8, 2, 64) == 1 * 8 * 64 * 128 * 2 + 1 * 6176);
  CHECK(cudnn_backward_workspace_estimate(0, 8, 2, 64) == 0);
  // The cubic worst case of a large cap: far beyond any bound (and no overflow).
  const std::int64_t at_64k = cudnn_backward_workspace_estimate(65536, 32, 8, 128);
  CHECK(at_64k > (std::int64_t{1} << 40));
  CHECK(cudnn_backward_workspace_estimate(std::int64_t{1} << 40, 64, 8, 128) ==
        std::numeric_limits<std::int64_t>::max());
  // Never decreasing in the cap (max_tokens_that_fit bisects on the plan).
  std::int64_t previous = 0;
  for (std::int64_t cap = 1; cap <= 4096; cap += 37) {
    const std::int64_t e = cudnn_backward_workspace_estimate(cap, 8, 2, 64);
    CHECK(e >= previous);
    previous = e;
  }
}
