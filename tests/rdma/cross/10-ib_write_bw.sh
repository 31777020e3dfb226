#!/usr/bin/env bash
# verbs RC write bandwidth between two hosts: ib_write_bw server in A, client in B.
set -euo pipefail
# shellcheck source=tests/rdma/cross-lib.sh
. "$CROSS_LIB"
server_client "ib_write_bw -d $VSG_DEV -x 1 -s 65536 -n 300" \
              "ib_write_bw -d $VSG_DEV -x 1 -s 65536 -n 300 $A_IP"
