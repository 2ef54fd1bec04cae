// Switches read from the environment (docs/API.md, Environment). Callers
// read each once into a function-local static: a switch holds for the
// process, and no hot path calls getenv.
#pragma once

#include <cstdlib>
#include <cstring>

namespace qsp {
namespace kern {

// $name set to something other than "0" (and not empty).
inline bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
// A default-on switch: $name unset, or set to something other than "0".
inline bool env_default_on(const char* name) { return !std::getenv(name) || env_on(name); }

}  // namespace kern
}  // namespace qsp
