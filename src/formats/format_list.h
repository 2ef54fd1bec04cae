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
  X(Q4_1)              \
  X(Q5_0)              \
  X(Q5_1)              \
  X(Q8_0)              \
  X(Q2_K)              \
  X(Q3_K)              \
  X(Q4_K)              \
  X(Q5_K)              \
  X(Q6_K)
