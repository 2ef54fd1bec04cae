// The kernel_formats tests' access to a lane's undecoded words of one unit:
// the formats whose raw_at takes the array and the unit index (the
// K-quants, Q4_0), and those that take the unit's quant and side pointers.
#pragma once

#include <cstddef>
#include <cstdint>

template <class T>
auto raw_of(typename T::Raw& r, const uint8_t* dev, size_t soff, int64_t u, int lane, int)
    -> decltype(T::raw_at(r, dev, soff, size_t(u), lane), void()) {
  T::raw_at(r, dev, soff, size_t(u), lane);
}
template <class T>
void raw_of(typename T::Raw& r, const uint8_t* dev, size_t soff, int64_t u, int lane, long) {
  T::raw_at(r, dev + u * T::kUnit, dev + soff + u * T::kScaleUnit, lane);
}
