#include <catch2/catch.hpp>
#include "common/quant.h"
TEST_CASE("placeholder") { REQUIRE(qsp::fp16_to_fp32(0x3c00) == 1.0f); }
