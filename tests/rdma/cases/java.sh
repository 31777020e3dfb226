#!/usr/bin/env bash
# A JVM program on RDMA (issue 21: every JVM program stayed on the kernel,
# "no-rdma-device", because the JVM opens IPv6 sockets and reaches IPv4
# peers through v4-mapped addresses). tests/rdma/progs/java/JavaEcho.java,
# a java.net ServerSocket and Socket, both under vsocket
# (VSOCKET_TRANSPORTS=rdma): the client echoes 1 MiB in 4 KiB round trips
# (SHA-256 compared) and `vsocket stat` must show both ends on rdma while
# it keeps the connection busy.
# shellcheck source=SCRIPTDIR/../lib.sh
source "$(dirname "$0")/../lib.sh"
port=7234
classes=$BUILD/tests/java
case_setup java
command -v java >/dev/null && [ -f "$classes/JavaEcho.class" ] ||
  { echo "FAIL: no java or no $classes/JavaEcho.class (scripts/install-deps.sh, then the build)"; exit 1; }
# A small heap and one compiler thread: the guest has 2 GiB and is slow.
jvm=(java -Xmx64m -XX:CICompilerCount=2 -XX:TieredStopAtLevel=1 -cp "$classes" JavaEcho)

vs_run "${jvm[@]}" server $port >"$tmp/server.log" 2>&1 &
pids+=("$!")
wait_port $port 300
vs_run "${jvm[@]}" client "$IP" $port $((1 << 20)) "$tmp/release" >"$tmp/client.log" 2>&1 &
cli=$!
pids+=("$cli")
wait_grep '^(PASS|FAIL)$' "$tmp/client.log" 600
rows=0
expect_rdma_rows 2 || rows=1
client_verdict "$cli" "$tmp/client.log" "$tmp/release" || exit 1
[ "$rows" = 0 ] || { echo "FAIL: the JVM's connection is not on rdma at both ends"; "$TOOL" stat --all; exit 1; }
echo "PASS: a JVM echo on rdma at both ends"
