// Built against an installed qsp through find_package(qsp 1 CONFIG).
#include <qsp/qsp.h>

#include <cstdio>
#include <memory>

int main() {
  std::printf("c++ consumer: qsp %s\n", qsp_version_string());
  qsp_cache_stats s;
  qsp_cache_stats_init(&s);
  return qsp_cache_stats_get(QSP_BACKEND_CPU, 0, &s) == QSP_OK ? 0 : 1;
}
