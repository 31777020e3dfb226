#!/usr/bin/env bash
# rsockets between two hosts: rstream server in A, client in B (4 KiB x 200).
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
server_client "rstream -b $A_IP -S 4096 -C 200" "rstream -s $A_IP -S 4096 -C 200"
