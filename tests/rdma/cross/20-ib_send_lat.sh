#!/usr/bin/env bash
# verbs RC send latency between two hosts: ib_send_lat server in A, client in B.
set -euo pipefail
# -u 17: 0.5 s ack timeout (default 14 = 67 ms is shorter than the emulated
# round trip on a loaded host: spurious retransmissions).
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
server_client "ib_send_lat -d $VSG_DEV -x 1 -u 17 -s 2 -n 300" \
              "ib_send_lat -d $VSG_DEV -x 1 -u 17 -s 2 -n 300 $A_IP"
