// The teardown order of what a cuDNN attention holds (kernels/cudnn_lifetime.h): the composition
// CudnnAttention::Impl is made of (CudnnParts<LazyHandle<...>, GraphCache, RaggedBatch> in
// cudnn_attention.cu), here over fakes that record their lives. The graphs, whose execution plans
// were finalised with the handle, must be destroyed before the handle; a handle never used is
// never created nor destroyed.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/kernels/cudnn_lifetime.h"

namespace {

std::vector<std::string>& events() {
  static std::vector<std::string> log;
  return log;
}

// A handle API: the handle is a pointer to one of two slots, so a destroy of the wrong value shows.
int slots[2];
int creates = 0;
bool fail_create = false;

struct FakeApi {
  using Handle = int*;
  static Handle create() {
    if (fail_create) odc::fail("cudnnCreate failed (status 1)");
    events().push_back("handle created");
    return &slots[creates++ % 2];
  }
  static void destroy(Handle h) { events().push_back(h == &slots[0] ? "handle destroyed" : "wrong handle destroyed"); }
};

// The graph cache: built with the handle (its plans hold it), constructed from the parts' arguments.
struct FakeGraphs {
  FakeGraphs(bool deterministic, std::size_t capacity, long long workspace_limit) {
    events().push_back("graphs " + std::to_string(deterministic) + " " + std::to_string(capacity) + " " +
                       std::to_string(workspace_limit));
  }
  ~FakeGraphs() {
    events().push_back(built_with != nullptr ? "graphs destroyed (plans of the handle)" : "graphs destroyed");
  }
  FakeGraphs(const FakeGraphs&) = delete;
  FakeGraphs& operator=(const FakeGraphs&) = delete;
  void build(int* handle) { built_with = handle; }
  int* built_with = nullptr;
};

struct FakeBatch {
  ~FakeBatch() { events().push_back("batch destroyed"); }
};

using Parts = odc::kernels::CudnnParts<odc::kernels::LazyHandle<FakeApi>, FakeGraphs, FakeBatch>;

}  // namespace

TEST_CASE("cuDNN attention's parts: the graphs are destroyed before the handle they were built with",
          "[cudnn_lifetime]") {
  events().clear();
  creates = 0;
  {
    Parts parts(true, std::size_t{16}, 1LL << 31);
    int* h = parts.handle.get();
    CHECK(parts.handle.get() == h);  // created once
    parts.graphs.build(h);
  }
  const std::vector<std::string> expected = {
      "graphs 1 16 2147483648",                  // the graphs from the parts' arguments
      "handle created",                          // on first use
      "batch destroyed",                         // reverse order of declaration:
      "graphs destroyed (plans of the handle)",  // the graphs before
      "handle destroyed",                        // the handle, last
  };
  CHECK(events() == expected);
}

TEST_CASE("cuDNN attention's parts: a handle never used is neither created nor destroyed", "[cudnn_lifetime]") {
  events().clear();
  creates = 0;
  { Parts parts(false, std::size_t{2}, 0LL); }
  CHECK(events() == std::vector<std::string>{"graphs 0 2 0", "batch destroyed", "graphs destroyed"});
}

TEST_CASE("cuDNN attention's parts: a failed create owns nothing, and the next use creates", "[cudnn_lifetime]") {
  events().clear();
  creates = 0;
  {
    Parts parts(true, std::size_t{16}, 0LL);
    fail_create = true;
    CHECK_THROWS_WITH(parts.handle.get(), Catch::Contains("cudnnCreate failed"));
    fail_create = false;
    CHECK(parts.handle.get() == &slots[0]);
  }
  CHECK(events() ==
        std::vector<std::string>{"graphs 1 16 0", "handle created", "batch destroyed", "graphs destroyed",
                                 "handle destroyed"});
}
