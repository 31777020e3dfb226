#!/usr/bin/env bash
# verbs RC send latency between two hosts: ib_send_lat server in A, client in B.
set -euo pipefail
# shellcheck source=tests/rdma/cross-lib.sh
. "$CROSS_LIB"
server_client "ib_send_lat -d $VSG_DEV -x 1 -s 2 -n 300" \
              "ib_send_lat -d $VSG_DEV -x 1 -s 2 -n 300 $A_IP"
