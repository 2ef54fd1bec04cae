// Every weight format qsp computes with, named once: X(NAME) with NAME the
// suffix of QSP_DTYPE_<NAME> and of the Format record kFormat<NAME> that
// src/formats/<name>.cpp defines. The registry (formats.cpp) is generated
// from this list.
#pragma once

#define QSP_FORMATS(X) \
  X(F32)               \
  X(F16)               \
  X(BF16)              \
  X(Q4_0)              \
  X(Q8_0)
