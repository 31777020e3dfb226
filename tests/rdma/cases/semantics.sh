#!/usr/bin/env bash
# tests/rdma/cases/semantics.sh - the socket semantics suite
# (tests/shm/test_semantics.py) over the rdma transport: both ends of each
# connection under vsocket with VSOCKET_TRANSPORTS=rdma, connected over
# 10.77.0.1 (rxe0 on dummy0), `vsocket stat` must show transport "rdma".
# rdma-case-timeout: 900
# Run by tests/rdma/stage.sh in the Soft-RoCE guest (root, cwd = checkout);
# by hand:
#   VSOCKET_BUILD_DIR=$PWD/build tools/rdma-guest/run --timeout 900 -- bash tests/rdma/cases/semantics.sh
#
# Env: VSOCKET_SEMANTICS_SELECT   pytest -k expression (default: every scenario
#                                 but the slowest, see DEFAULT_SELECT below);
#                                 "all" runs everything
#      VSOCKET_SEMANTICS_IPV6=1   also run the IPv6 cases (adds fd77::1/64 to
#                                 dummy0, whose RoCE v2 GID rxe0 then carries)
#      VSOCKET_SEMANTICS_TIME_SCALE  time limit factor (default 10: TCG)
#      VSOCKET_PYTHON             the Python with pytest (default: the first
#                                 python3 binary on PATH with pytest, not a
#                                 pyenv shim)
#      VSOCKET_SEMANTICS_PYTEST_ARGS  more pytest arguments
source "$(dirname "$0")/../lib.sh"
set +e

# Python: a pyenv shim is a bash script that takes ~20 s per start under
# TCG; prefer a real python3 binary that has pytest, else resolve a shim once.
has_pytest() { "$1" -c 'import pytest' 2>/dev/null; }
py=${VSOCKET_PYTHON:-}
if [ -z "$py" ]; then
  for cand in $(type -ap python3); do
    [ "$(head -c 2 "$cand" 2>/dev/null)" = '#!' ] && continue
    has_pytest "$cand" && { py=$cand; break; }
  done
fi
if [ -z "$py" ]; then
  for cand in $(type -ap python3); do
    cand=$("$cand" -c 'import sys; print(sys.executable)' 2>/dev/null) || continue
    has_pytest "$cand" && { py=$cand; break; }
  done
fi
[ -n "$py" ] || { echo "FAIL: no python3 with pytest (set VSOCKET_PYTHON)"; exit 1; }

if [ "${VSOCKET_SEMANTICS_IPV6:-0}" = 1 ]; then
  ip -6 addr add fd77::1/64 dev dummy0 nodad 2>/dev/null || true
  export VSOCKET_SEMANTICS_RDMA_ADDR6=fd77::1
fi

# The whole suite (41 IPv4 scenarios) takes ~15 min in the guest (15-30 s a
# scenario: two Python starts and an rdma_cm set-up under TCG; a failing wait
# waits 10x its host limit). By default leave out, to stay under ~8 min:
# scenarios of the readiness layer that do not depend on the transport
# (DEL/re-ADD bookkeeping, a second epoll set, kernel fds mixed in, one of
# the two "two threads asleep" variants), those that take the connection
# back to TCP on purpose (splice: et_readd, out_after_leave), one of the two
# mixed-end and MSG_DONTWAIT/nonblocking variants, and the slow known rdma
# bug (del_fork: 26-125 s as it fails) with cold_et (shm-only).
# VSOCKET_SEMANTICS_SELECT=all runs everything.
DEFAULT_SELECT="not msg_dontwait and not kernel_fds_mixed and not del_readd and not del_peerclose \
and not et_readd and not out_after_leave and not two_sets and not two_epoll_sets and not plain-client \
and not cold_et and not del_fork and not oneshot and not close_one_of_two"
sel=${VSOCKET_SEMANTICS_SELECT:-$DEFAULT_SELECT}
[ "$sel" = all ] && sel=""
args=(-v -rfEsxX -p no:cacheprovider --durations=0)
[ -n "$sel" ] && args+=(-k "$sel")
# shellcheck disable=SC2206  # word splitting wanted
args+=(${VSOCKET_SEMANTICS_PYTEST_ARGS:-})

echo "semantics over rdma: $py, $(nproc) vCPUs, address $IP${VSOCKET_SEMANTICS_RDMA_ADDR6:+ and $VSOCKET_SEMANTICS_RDMA_ADDR6}${sel:+, -k '$sel'}"
start=$SECONDS
VSOCKET_SEMANTICS_TRANSPORT=rdma VSOCKET_SEMANTICS_RDMA_ADDR=$IP VSOCKET_BUILD_DIR=$BUILD \
  "$py" -m pytest "${args[@]}" tests/shm/test_semantics.py
rc=$?
echo "semantics over rdma: pytest exit $rc after $((SECONDS - start)) s"
exit $rc
