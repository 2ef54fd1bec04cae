#!/usr/bin/env bash
# temporary: device debug run of the wgmma attention variants (run from the repo root
# with docs/wip/wgmma-attention.patch applied; carry .carry)
QSP_GPU_TEST_FILTER="[.dbg]" scripts/gpu-check tests >/dev/null
grep -E "^case|^variant|HOST|DBG|relative L2" $OUT/gpu_tests.log | head -70
b=build-gpu
for v in 9 7 8; do
  echo "== variant $v [attention]"
  QSP_ATTN_DBG=$v timeout 120 $b/tests/qsp_gpu_tests "[attention]" > $OUT/att_$v.log 2>&1; echo rc=$?
  grep -E "test cases|assertions" $OUT/att_$v.log | tail -2
  if grep -q "All tests passed" $OUT/att_$v.log; then
    echo "== variant $v passes: full suite + benches"
    QSP_ATTN_DBG=$v timeout 200 $b/tests/qsp_gpu_tests > $OUT/full_$v.log 2>&1; echo full rc=$?
    grep -E "test cases|assertions|FAILED" $OUT/full_$v.log | tail -5
    QSP_ATTN_DBG=$v timeout 60 $b/bench/bench_attention > $OUT/bench_attention_$v.log 2>&1; tail -25 $OUT/bench_attention_$v.log
    QSP_ATTN_DBG=$v timeout 150 $b/bench/bench_prefill --model 8b --type q4_0 --tokens 1,2048,8192 > $OUT/bench_prefill_$v.log 2>&1; tail -20 $OUT/bench_prefill_$v.log
    break
  fi
done
