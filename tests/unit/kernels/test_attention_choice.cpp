// The choice between the native attention kernels and cuDNN's (attention_choice.h), over the
// facts the CUDA backend gathers: each rule that rules cuDNN out, under auto (native with the
// reason) and under cudnn (an error naming model.attention and the reason), and the facts of
// the GPUs the project runs on (H100/H200: 9.0, A100: 8.0, B200: 10.0).
#include <catch2/catch.hpp>

#include <string>

#include "odc/backend/backend_factory.h"
#include "odc/core/error.h"
#include "odc/kernels/attention_choice.h"
#include "odc/kernels/cudnn_ragged.h"

namespace {

using namespace odc;
using namespace odc::kernels;

// An H200 with cuDNN 9.19.0 and a LLaMA-3-8B attention shape (32 heads over 8, head_dim 128).
AttentionFacts hopper(AttentionMode mode = AttentionMode::automatic) {
  AttentionFacts f;
  f.mode = mode;
  f.frontend_built = true;
  f.cudnn_version = 91900;
  f.cc_major = 9;
  f.cc_minor = 0;
  f.n_heads = 32;
  f.n_kv_heads = 8;
  f.head_dim = 128;
  f.dtype = DType::bf16;
  f.deterministic = true;
  f.auto_takes_cudnn = true;  // the rules as auto applies them once cuDNN is proven on a device
  return f;
}

// Under auto: native, and the reason carries `why`; under cudnn: an error with model.attention and `why`.
void check_ruled_out(AttentionFacts f, const std::string& why) {
  f.mode = AttentionMode::automatic;
  REQUIRE(cudnn_attention_blocker(f).has_value());
  CHECK_THAT(*cudnn_attention_blocker(f), Catch::Contains(why));
  const AttentionChoice c = choose_attention(f);
  CHECK(c.impl == AttentionImpl::native);
  CHECK_THAT(c.reason, Catch::Contains("model.attention: auto") && Catch::Contains(why));
  f.mode = AttentionMode::cudnn;
  CHECK_THROWS_WITH(choose_attention(f), Catch::Contains("model.attention=cudnn") && Catch::Contains(why));
}

}  // namespace

TEST_CASE("attention mode: parsed from model.attention, other values refused", "[attention_choice]") {
  CHECK(parse_attention_mode("auto") == AttentionMode::automatic);
  CHECK(parse_attention_mode("cudnn") == AttentionMode::cudnn);
  CHECK(parse_attention_mode("native") == AttentionMode::native);
  CHECK_THROWS_WITH(parse_attention_mode("flash"), Catch::Contains("model.attention") && Catch::Contains("'flash'"));
  CHECK_THROWS_AS(parse_attention_mode(""), Error);
  for (AttentionMode m : {AttentionMode::automatic, AttentionMode::cudnn, AttentionMode::native}) {
    CHECK(parse_attention_mode(attention_mode_name(m)) == m);
  }
  CHECK(attention_impl_name(AttentionImpl::cudnn) == "cudnn");
  CHECK(attention_impl_name(AttentionImpl::native) == "native");
}

TEST_CASE("attention choice: auto keeps the native kernels until cuDNN is proven, and says so", "[attention_choice]") {
  AttentionFacts f = hopper();
  f.auto_takes_cudnn = kAutoTakesCudnn;
  const AttentionChoice c = choose_attention(f);
  CHECK(c.impl == (kAutoTakesCudnn ? AttentionImpl::cudnn : AttentionImpl::native));
  if (!kAutoTakesCudnn) {
    CHECK_THAT(c.reason, Catch::Contains("cuDNN 9.19.0 could serve") && Catch::Contains("model.attention: cudnn"));
  }
  f.mode = AttentionMode::cudnn;  // the opt-in works regardless
  CHECK(choose_attention(f).impl == AttentionImpl::cudnn);
}

TEST_CASE("attention choice: cuDNN version text", "[attention_choice]") {
  CHECK(cudnn_version_text(91900) == "9.19.0");
  CHECK(cudnn_version_text(90602) == "9.6.2");
  CHECK(cudnn_version_text(92600) == "9.26.0");
  CHECK(cudnn_version_text(0) == "none");
}

TEST_CASE("attention choice: cuDNN where every rule allows it", "[attention_choice]") {
  SECTION("auto on an H200 with cuDNN 9.19, GQA 32/8 d128") {
    const AttentionChoice c = choose_attention(hopper());
    CHECK(c.impl == AttentionImpl::cudnn);
    CHECK_THAT(c.reason, Catch::Contains("cuDNN 9.19.0") && Catch::Contains("32 heads over 8 kv heads") &&
                             Catch::Contains("head_dim 128") && Catch::Contains("deterministic backward"));
  }
  SECTION("cudnn requested, MHA 16/16 d64") {
    AttentionFacts f = hopper(AttentionMode::cudnn);
    f.n_heads = f.n_kv_heads = 16;
    f.head_dim = 64;
    const AttentionChoice c = choose_attention(f);
    CHECK(c.impl == AttentionImpl::cudnn);
    CHECK_THAT(c.reason, Catch::Contains("model.attention: cudnn"));
  }
  SECTION("the oldest cuDNN it takes") {
    AttentionFacts f = hopper();
    f.cudnn_version = kCudnnMinVersion;
    CHECK(choose_attention(f).impl == AttentionImpl::cudnn);
  }
  SECTION("A100 (8.0) when the backward need not be deterministic") {
    AttentionFacts f = hopper();
    f.cc_major = 8;
    f.deterministic = false;
    CHECK(choose_attention(f).impl == AttentionImpl::cudnn);
    CHECK_THAT(choose_attention(f).reason, Catch::Contains("non-deterministic backward"));
  }
  SECTION("B200 (10.0) with cuDNN 9.18.0, deterministic") {
    AttentionFacts f = hopper();
    f.cc_major = 10;
    f.cudnn_version = kCudnnBlackwellDeterministicVersion;
    CHECK(choose_attention(f).impl == AttentionImpl::cudnn);
  }
}

TEST_CASE("attention choice: native requested is native whatever the facts", "[attention_choice]") {
  AttentionFacts f = hopper(AttentionMode::native);
  CHECK(choose_attention(f).impl == AttentionImpl::native);
  CHECK_THAT(choose_attention(f).reason, Catch::Contains("model.attention: native"));
  f.frontend_built = false;
  f.cudnn_version = 0;
  CHECK(choose_attention(f).impl == AttentionImpl::native);
}

TEST_CASE("attention choice: each rule that rules cuDNN out", "[attention_choice]") {
  SECTION("no frontend in the build") {
    AttentionFacts f = hopper();
    f.frontend_built = false;
    check_ruled_out(f, "built without the cuDNN frontend");
  }
  SECTION("no loadable cuDNN, with and without the loader's message") {
    AttentionFacts f = hopper();
    f.cudnn_version = 0;
    f.cudnn_load_error = "libcudnn.so.9: cannot open shared object file";
    check_ruled_out(f, "libcudnn.so.9: cannot open shared object file");
    f.cudnn_load_error.clear();
    check_ruled_out(f, "no cuDNN library could be loaded (libcudnn.so.9 not found)");
  }
  SECTION("cuDNN older than 9.6.0") {
    AttentionFacts f = hopper();
    f.cudnn_version = 90501;
    check_ruled_out(f, "cuDNN 9.5.1 is older than 9.6.0");
  }
  SECTION("cuDNN 9.10.0 and 9.10.1 (known backward bug), not 9.10.2") {
    AttentionFacts f = hopper();
    f.cudnn_version = 91000;
    check_ruled_out(f, "cuDNN 9.10.0 has a known bf16 attention backward bug");
    f.cudnn_version = 91001;
    check_ruled_out(f, "cuDNN 9.10.1 has a known");
    f.cudnn_version = 91002;
    CHECK_FALSE(cudnn_attention_blocker(f).has_value());
  }
  SECTION("a device below compute capability 8.0 (V100)") {
    AttentionFacts f = hopper();
    f.cc_major = 7;
    f.cc_minor = 0;
    check_ruled_out(f, "compute capability 7.0 is below 8.0");
  }
  SECTION("dtype other than bfloat16") {
    AttentionFacts f = hopper();
    f.dtype = DType::f16;
    check_ruled_out(f, "dtype float16");
  }
  SECTION("head_dim other than 64 or 128") {
    AttentionFacts f = hopper();
    for (int d : {32, 80, 96, 256}) {
      f.head_dim = d;
      check_ruled_out(f, "head_dim " + std::to_string(d));
    }
  }
  SECTION("heads not a whole number of kv groups") {
    AttentionFacts f = hopper();
    f.n_heads = 12;
    f.n_kv_heads = 8;
    check_ruled_out(f, "12 query heads are not a whole number of groups of 8 kv heads");
    f.n_kv_heads = 0;
    check_ruled_out(f, "groups of 0 kv heads");
  }
  SECTION("deterministic backward on 8.x and 12.x") {
    AttentionFacts f = hopper();
    f.cc_major = 8;
    f.cc_minor = 6;
    check_ruled_out(f, "no deterministic backward for packed sequences on compute capability 8.6");
    f.cc_major = 12;
    f.cc_minor = 0;
    check_ruled_out(f, "compute capability 12.0");
  }
  SECTION("deterministic backward on 10.x with cuDNN below 9.18.0") {
    AttentionFacts f = hopper();
    f.cc_major = 10;
    f.cudnn_version = 91701;
    check_ruled_out(f, "needs cuDNN 9.18.0 (loaded: 9.17.1)");
  }
  SECTION("the first rule that fails is the one reported") {
    AttentionFacts f = hopper();
    f.frontend_built = false;
    f.cudnn_version = 0;
    f.head_dim = 80;
    CHECK(*cudnn_attention_blocker(f) == "built without the cuDNN frontend");
  }
}

TEST_CASE("model.attention on the CPU backend: cudnn refused, auto and native run the CPU kernel",
          "[attention_choice]") {
  CHECK_THROWS_WITH(backend::make_backend("cpu", DType::f32, 1, 0, "cudnn"),
                    Catch::Contains("model.attention=cudnn on model.device=cpu"));
  CHECK_THROWS_WITH(backend::make_backend("cpu", DType::f32, 1, 0, "flash"), Catch::Contains("model.attention"));
  for (const char* mode : {"auto", "native"}) {
    const auto b = backend::make_backend("cpu", DType::f32, 1, 0, mode);
    CHECK(b->name() == "cpu");
    CHECK(b->select_attention(8, 2, 64) == "cpu attention kernels");
  }
}

TEST_CASE("cuDNN shape classes and ragged tables: padded batch, sequence bucket, offsets", "[attention_choice]") {
  CHECK(cudnn_batch_bucket(0) == 1);
  CHECK(cudnn_batch_bucket(3) == 4);
  CHECK(cudnn_batch_bucket(8) == 8);
  CHECK(cudnn_seqlen_bucket(1) == 64);
  CHECK(cudnn_seqlen_bucket(100) == 128);
  CHECK(cudnn_seqlen_bucket(65536) == 65536);
  // Three sequences (one empty, one of a single token) of GQA 4/2, head_dim 64: B pads to 4.
  const std::vector<std::int32_t> cu = {0, 100, 100, 101};
  const CudnnRaggedTables t = cudnn_ragged_tables(cu.data(), 3, 4, 2, 64);
  CHECK(t.b == 4);
  CHECK(t.s == 128);
  CHECK(t.t == 128);  // 101 tokens: the backward's token bucket
  CHECK(t.seq_len == std::vector<std::int32_t>{100, 0, 1, 0});
  CHECK(t.q_offsets == std::vector<std::int32_t>{0, 100 * 256, 100 * 256, 101 * 256, 101 * 256});
  CHECK(t.kv_offsets == std::vector<std::int32_t>{0, 100 * 128, 100 * 128, 101 * 128, 101 * 128});
  CHECK(t.stats_offsets == std::vector<std::int32_t>{0, 400, 400, 404, 404});
  // Microbatches of one class share graphs: the same B and S for other bounds of the same counts.
  const std::vector<std::int32_t> other = {0, 70, 90, 127};
  const CudnnRaggedTables u = cudnn_ragged_tables(other.data(), 3, 4, 2, 64);
  CHECK((u.b == t.b && u.s == t.s));
  // What the graphs cannot take is refused, naming it.
  const std::vector<std::int32_t> decreasing = {0, 10, 5};
  CHECK_THROWS_WITH(cudnn_ragged_tables(decreasing.data(), 2, 4, 2, 64), Catch::Contains("decrease at sequence 1"));
  CHECK_THROWS_WITH(cudnn_ragged_tables(cu.data(), 3, 4, 2, 96), Catch::Contains("head_dim 96"));
  CHECK_THROWS_WITH(cudnn_ragged_tables(cu.data(), 3, 6, 4, 64), Catch::Contains("not a whole number of groups"));
  const std::vector<std::int32_t> huge = {0, 1 << 24};
  CHECK_THROWS_WITH(cudnn_ragged_tables(huge.data(), 1, 32, 8, 128), Catch::Contains("exceed the int32 ragged offsets"));
}
