// NCCL through dlopen: src/cuda/nccl_lib.h.
#include "cuda/nccl_lib.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <type_traits>

#include "common/error.h"

namespace qsp {

namespace {

// ncclGetVersion's code before 2.9 was major * 1000 + minor * 100 + patch.
int normalized_version(int code) {
  if (code >= 10000) return code;
  return (code / 1000) * 10000 + (code % 1000 / 100) * 100 + code % 100;
}

std::string version_string(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace

std::string NcclLib::describe() const { return "NCCL " + version_string(version) + " (" + path + ")"; }

NcclLib load_nccl(const std::string& path) {
  const char* hint = "multi-GPU contexts need NCCL 2.9 or newer (Debian: libnccl2); QSP_NCCL_LIBRARY names another file";
  dlerror();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* why = dlerror();
    throw Error(QSP_ERR_UNSUPPORTED, strprintf("cannot load NCCL: dlopen(%s): %s; %s", path.c_str(),
                                               why ? why : "unknown error", hint));
  }
  NcclLib lib;
  lib.path = path;
  lib.handle = std::shared_ptr<void>(h, [](void* p) { dlclose(p); });
  const auto sym = [&](auto& fn, const char* name) {
    void* p = dlsym(h, name);
    if (!p)
      throw Error(QSP_ERR_UNSUPPORTED,
                  strprintf("cannot use NCCL from %s: it has no %s; %s", path.c_str(), name, hint));
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym(lib.get_version, "ncclGetVersion");
  sym(lib.get_error_string, "ncclGetErrorString");
  sym(lib.get_unique_id, "ncclGetUniqueId");
  sym(lib.comm_init_rank, "ncclCommInitRank");
  sym(lib.comm_init_all, "ncclCommInitAll");
  sym(lib.comm_destroy, "ncclCommDestroy");
  sym(lib.all_reduce, "ncclAllReduce");
  sym(lib.all_gather, "ncclAllGather");
  sym(lib.group_start, "ncclGroupStart");
  sym(lib.group_end, "ncclGroupEnd");
  int code = 0;
  const int r = lib.get_version(&code);
  if (r != 0)
    throw Error(QSP_ERR_UNSUPPORTED, strprintf("cannot use NCCL from %s: ncclGetVersion failed (%d: %s)",
                                               path.c_str(), r, lib.get_error_string(r)));
  lib.version = normalized_version(code);
  if (lib.version < kNcclMinVersion)
    throw Error(QSP_ERR_UNSUPPORTED, strprintf("cannot use NCCL from %s: version %s is older than %s; %s",
                                               path.c_str(), version_string(lib.version).c_str(),
                                               version_string(kNcclMinVersion).c_str(), hint));
  return lib;
}

const NcclLib& nccl() {
  static std::mutex mu;
  // Successes only (node addresses are stable); never freed: NCCL keeps
  // threads of its own, so it is not unloaded at exit.
  static auto* loaded = new std::map<std::string, NcclLib>;
  const char* env = std::getenv("QSP_NCCL_LIBRARY");
  const std::string path = env && *env ? env : "libnccl.so.2";
  std::lock_guard<std::mutex> lock(mu);
  auto it = loaded->find(path);
  if (it == loaded->end()) it = loaded->emplace(path, load_nccl(path)).first;
  return it->second;
}

}  // namespace qsp
