// The GGUF reader's own rules: every GGML type id current files use (and what
// it says about newer and removed ones), and the byte range of every tensor,
// zero-sized ones included, against the data section (issue 22). Inputs that
// fuzzing found live in tests/data/gguf/ and in the fuzz corpus.
#include <fstream>
#include <iterator>

#include "gguf_test_util.h"

using namespace gguf_test;

namespace {

Bytes read_data_file(const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(__FILE__).parent_path() / "data" / "gguf" / name;
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

qsp_gguf_tensor_desc tensor0(const qsp_gguf* g) {
  qsp_gguf_tensor_desc d;
  qsp_gguf_tensor_desc_init(&d);
  REQUIRE(qsp_gguf_tensor_info(g, 0, &d) == QSP_OK);
  return d;
}

}  // namespace

TEST_CASE("gguf reader: every GGML type id through 42 opens with GGML's block geometry", "[gguf][types]") {
  struct Want {
    uint32_t id;
    const char* name;
    uint32_t block, bytes;
  };
  // ggml.c type_traits: a sample of each family, and the newest ids.
  const Want wants[] = {
      {0, "f32", 1, 4},         {1, "f16", 1, 2},         {3, "q4_1", 32, 20},     {9, "q8_1", 32, 36},
      {10, "q2_K", 256, 84},    {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},  {16, "iq2_xxs", 256, 66},
      {19, "iq1_s", 256, 50},   {20, "iq4_nl", 32, 18},   {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},
      {28, "f64", 1, 8},        {29, "iq1_m", 256, 56},   {30, "bf16", 1, 2},      {34, "tq1_0", 256, 54},
      {35, "tq2_0", 256, 66},   {39, "mxfp4", 32, 17},    {40, "nvfp4", 64, 36},   {41, "q1_0", 128, 18},
      {42, "q2_0", 64, 18},
  };
  for (const Want& w : wants) {
    INFO("type id " << w.id);
    CHECK(std::string(qsp_gguf_type_name(int32_t(w.id))) == w.name);
    // Two rows of two blocks each.
    const Bytes f = one_tensor("t", {2 * uint64_t(w.block), 2}, w.id, 0, 4 * w.bytes);
    auto o = open_mem(f);
    INFO(o->msg);
    REQUIRE(o->st == QSP_OK);
    const qsp_gguf_tensor_desc d = tensor0(o->g);
    CHECK(d.type == int32_t(w.id));
    CHECK(d.n_bytes == 4 * w.bytes);
    CHECK(std::string(d.type_name) == w.name);
  }
  // Every id of the table opens; block sizes are checked against ne[0].
  for (int32_t t = 0; t < qsp::gguf::kTypeCount; ++t) {
    const qsp::gguf::TypeTraits& tt = qsp::gguf::type_traits(t);
    if (!tt.name) continue;
    INFO("type id " << t);
    CHECK(open_mem(one_tensor("t", {tt.block_size}, uint32_t(t), 0, tt.type_size))->st == QSP_OK);
    if (tt.block_size > 1)
      CHECK_FAILS(one_tensor("t", {tt.block_size + 1}, uint32_t(t), 0, 2 * tt.type_size), QSP_ERR_BAD_FORMAT,
                  "is not a multiple of the");
  }
}

TEST_CASE("gguf reader: newer and removed type ids are unsupported, with a reason", "[gguf][types]") {
  for (uint32_t id : {43u, 44u, 200u, 0x7fffffffu, 0x80000000u, 0xffffffffu}) {
    INFO("type id " << id);
    const std::string want = "type id " + std::to_string(id) + ", which is newer than this reader";
    CHECK_FAILS(one_tensor("w", {32}, id, 0, 128), QSP_ERR_UNSUPPORTED, "tensor w", want.c_str());
  }
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u}) {
    INFO("type id " << id);
    const std::string want = "type id " + std::to_string(id) + ", a GGML type that was removed";
    CHECK_FAILS(one_tensor("w", {32}, id, 0, 128), QSP_ERR_UNSUPPORTED, "tensor w", want.c_str());
  }
}

TEST_CASE("gguf reader: a model with a type qsp cannot compute opens and says which", "[gguf][types]") {
  Spec s;
  s.retype["blk.0.ffn_up.weight"] = 39;  // mxfp4
  s.retype["blk.0.ffn_gate.weight"] = 20;  // iq4_nl
  const Bytes f = build(s);
  auto o = open_mem(f);
  REQUIRE(o->st == QSP_OK);
  qsp_context_params p;
  qsp_context_params_init(&p);
  if (qsp::fmt::find(20) == nullptr) {
    CHECK(qsp_gguf_fill_params(o->g, &p) == QSP_ERR_UNSUPPORTED);
    CHECK(std::string(qsp_gguf_last_error()).find("blk.0.ffn_gate.weight has type iq4_nl (20)") != std::string::npos);
  }
}

TEST_CASE("gguf reader: zero-sized tensors are accepted with an offset inside the data section", "[gguf][bounds]") {
  SECTION("at the start, in the middle and at the very end of the data section") {
    for (uint64_t off : {0, 32, 128}) {
      INFO("offset " << off);
      const Bytes f = one_tensor("z", {32, 0}, 0, off, 128);
      auto o = open_mem(f);
      INFO(o->msg);
      REQUIRE(o->st == QSP_OK);
      qsp_gguf_info info;
      qsp_gguf_info_init(&info);
      REQUIRE(qsp_gguf_get_info(o->g, &info) == QSP_OK);
      const qsp_gguf_tensor_desc d = tensor0(o->g);
      CHECK(d.n_bytes == 0);
      CHECK(d.n_rows == 0);
      CHECK(d.offset == info.data_offset + off);
      CHECK(d.offset <= f.size());
      CHECK(static_cast<const uint8_t*>(d.data) == f.data() + d.offset);
    }
  }
  SECTION("past the end of the file") {
    CHECK_FAILS(one_tensor("z", {32, 0}, 0, 160, 128), QSP_ERR_BAD_FORMAT, "tensor z", "0 bytes at offset 160",
                "ends past the end of the file");
    CHECK_FAILS(one_tensor("z", {0}, 2, uint64_t(1) << 40, 0), QSP_ERR_BAD_FORMAT, "tensor z",
                "ends past the end of the file");
  }
}

TEST_CASE("gguf reader: a data section that starts past the end of the file is a truncated file", "[gguf][bounds]") {
  // general.alignment 1 MiB: the tensor infos end long before the aligned data section would start.
  auto file = [](uint64_t n_tensors) {
    Raw r;
    r.header(n_tensors, 1).kv_u32("general.alignment", 1u << 20);
    for (uint64_t i = 0; i < n_tensors; ++i) r.tensor("z" + std::to_string(i), {32, 0}, 0, 0);
    return r.zeros(64).b;
  };
  CHECK_FAILS(file(1), QSP_ERR_BAD_FORMAT, "truncated file", "data section would start at offset 1048576",
              "past the end of the file");
  CHECK_FAILS(file(3), QSP_ERR_BAD_FORMAT, "truncated file");
  CHECK(open_mem(file(0))->st == QSP_OK);  // no tensors, no data section needed
}

TEST_CASE("gguf reader: the fuzzing finding of issue 22 (zero-size tensor past EOF)", "[gguf][bounds]") {
  // token_embd.weight of shape [274877906976, 0] at relative offset 0, with
  // general.alignment = 2 MiB in a 983-byte file: its data section, and so
  // the tensor, would start 2 MiB into the file.
  const Bytes f = read_data_file("zero_size_tensor_past_eof");
  REQUIRE(f.size() == 983);
  auto o = open_mem(f);
  CHECK(o->st == QSP_ERR_BAD_FORMAT);
  CHECK(o->msg.find("truncated file") != std::string::npos);
  CHECK(o->msg.find("data section would start at offset 2097152") != std::string::npos);
}
