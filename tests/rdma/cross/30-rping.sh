#!/usr/bin/env bash
# rdma_cm between two hosts: rping server in A, client in B (20 pings, verified).
set -euo pipefail
# shellcheck source=/dev/null  # tests/rdma/cross-lib.sh
. "$CROSS_LIB"
server_client "rping -s -a $A_IP -C 20 -V" "rping -c -a $A_IP -C 20 -V"
