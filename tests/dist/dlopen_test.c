/* dlopen()s libqsp.so.1 and resolves every function named on stdin (one per
 * line: the public API extracted from the headers), then calls the version
 * functions through the resolved pointers. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  char name[256];
  int n = 0, missing = 0;
  void* h;
  const char* (*version)(void);
  unsigned (*abi)(void);
  if (argc < 2) { fprintf(stderr, "usage: dlopen_test LIB < names\n"); return 2; }
  h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  while (fgets(name, sizeof name, stdin)) {
    name[strcspn(name, "\r\n")] = 0;
    if (!*name) continue;
    ++n;
    if (!dlsym(h, name)) { fprintf(stderr, "unresolved: %s\n", name); ++missing; }
  }
  *(void**)(&version) = dlsym(h, "qsp_version_string");
  *(void**)(&abi) = dlsym(h, "qsp_abi_version");
  if (!version || !abi || abi() != 1) { fprintf(stderr, "version functions broken\n"); return 1; }
  printf("resolved %d of %d functions; qsp %s, ABI %u\n", n - missing, n, version(), abi());
  dlclose(h);
  return missing || n < 20 ? 1 : 0;
}
