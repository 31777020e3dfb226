#!/usr/bin/env bash
# test_cli.sh VSOCKET - the tool's messages and exit codes, and the library's
# handling of bad configuration, as a script sees them.
set -u
vs=$1
passed=0 failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VSOCKET_STATS_DIR=$tmp

# expect NAME CODE PATTERN -- COMMAND...: exit code CODE and PATTERN in stdout+stderr.
expect() {
  local name=$1 code=$2 pattern=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$code" ] && grep -qE -- "$pattern" <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    printf 'FAIL %s: exit %s (want %s), output:\n%s\n' "$name" "$rc" "$code" "$out"
  fi
}

expect no-command 2 'usage: vsocket' -- "$vs"
expect unknown-command 2 "unknown command 'frob'" -- "$vs" frob
expect version 0 '^vsocket [0-9]+\.[0-9]+' -- "$vs" version
expect help 0 'Exit codes' -- "$vs" help
expect run-help 0 'usage: vsocket run' -- "$vs" run --help
expect stat-help 0 'usage: vsocket stat' -- "$vs" help stat
expect run-no-program 2 'no program given' -- "$vs" run
expect run-no-program-dashdash 2 'no program given' -- "$vs" run --
expect run-not-found 127 'no-such-program-xyz: command not found' -- "$vs" run -- no-such-program-xyz
expect run-not-found-path 127 'command not found|No such file' -- "$vs" run -- /nonexistent/prog
touch "$tmp/not-exec"
expect run-not-executable 126 'Permission denied' -- "$vs" run -- "$tmp/not-exec"
expect run-bad-transport 2 "unknown transport 'carrier-pigeon'" -- "$vs" run --transport=carrier-pigeon -- true
expect run-bad-log-level 2 'accepted values: none, error' -- "$vs" run --log-level=loud -- true
expect run-unknown-option 2 "unknown option '--frob'" -- "$vs" run --frob -- true
expect run-exit-code 7 '' -- "$vs" run -- sh -c 'exit 7'
expect run-missing-library 5 'VSOCKET_LIBRARY=/nonexistent' -- env VSOCKET_LIBRARY=/nonexistent/libvsocket.so "$vs" run -- true
expect stat-none 3 'no process is running with vsocket' -- "$vs" stat
expect stat-none-json 3 '^\{"processes":\[\]\}' -- "$vs" stat --json
expect stat-bad-pid 2 '--pid takes a process id' -- "$vs" stat --pid abc
expect stat-bad-watch 2 '--watch takes seconds' -- "$vs" stat --watch=0
expect doctor-usage 2 "unknown argument" -- "$vs" doctor --frob
out=$("$vs" doctor 2>&1); rc=$?
if { [ $rc -eq 0 ] || [ $rc -eq 4 ]; } && grep -q '^rdma: \(usable\|not usable\)' <<<"$out" && grep -q 'transport kernel' <<<"$out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); printf 'FAIL doctor: exit %s\n%s\n' "$rc" "$out"
fi

# Bad VSOCKET_* values: a message naming the variable and accepted values,
# and the program still runs (to completion, with its own exit code).
expect env-bad-transports 0 "VSOCKET_TRANSPORTS='x' is invalid.*accepted values" -- env VSOCKET_TRANSPORTS=x "$vs" run -- true
expect env-bad-level 0 "VSOCKET_LOG_LEVEL='7' is invalid" -- env VSOCKET_LOG_LEVEL=7 "$vs" run -- true
expect env-bad-stats 0 "VSOCKET_STATS='perhaps' is invalid" -- env VSOCKET_STATS=perhaps "$vs" run -- true
expect env-bad-max 0 "VSOCKET_STATS_MAX='-1' is invalid" -- env VSOCKET_STATS_MAX=-1 "$vs" run -- true
expect env-bad-logfile 0 "VSOCKET_LOG_FILE='/nonexistent/x' cannot be opened" -- env VSOCKET_LOG_FILE=/nonexistent/x "$vs" run -- true
expect env-bad-statsdir 0 "statistics disabled: cannot create" -- env VSOCKET_STATS_DIR=/nonexistent "$vs" run -- python3 -c 'import socket; socket.socket()'

# A program that closes every fd (as daemons do) and reuses the number of our
# log file must never receive our log lines in its own file.
"$vs" run --log-level=debug --log-file="$tmp/vs.log" -- python3 -c '
import os, socket, sys
os.closerange(3, 256)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
for _ in range(3):
    socket.socket().close()
os.write(fd, b"clean\n")' "$tmp/app.out"
if [ "$(cat "$tmp/app.out")" = clean ]; then passed=$((passed + 1)); else
  failed=$((failed + 1)); printf 'FAIL log-fd-reuse: the program file holds:\n%s\n' "$(head -3 "$tmp/app.out")"; fi

# exec with a scrubbed environment keeps vsocket loaded...
expect exec-follow 0 'libvsocket\.so' -- "$vs" run -- env -i /bin/sh -c 'echo "$LD_PRELOAD"'
# ...unless the user said not to.
expect exec-nofollow 0 '^$' -- env VSOCKET_FOLLOW_EXEC=off "$vs" run -- env -i /bin/sh -c 'echo "$LD_PRELOAD"'

# A live process shows up with its socket, transport and reason; a
# disabled-by-config reason when the user chose the kernel.
"$vs" run --transport=kernel -- python3 -c '
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); time.sleep(300)' &
pid=$!
start=$SECONDS
# Until its socket listens: the process shows from its start (the preload's
# load), before python made the socket (under load that gap failed the
# check below once). The deadline bounds a hang only.
until "$vs" stat --pid $pid 2>/dev/null | grep -q listening || [ $SECONDS -gt $((start + 180)) ]; do sleep 0.1; done
expect stat-live 0 "\"pid\":$pid.*\"state\":\"listening\".*\"transport\":\"kernel\",\"reason\":\"disabled-by-config\"" -- "$vs" stat --json --pid $pid
expect stat-table 0 "^$pid +[0-9]+ +tcp +listening +127\.0\.0\.1:[0-9]+ .* kernel .* disabled-by-config" -- "$vs" stat
# --watch refreshes until interrupted: read until a 4th table starts (so 3
# whole ones), however long the machine takes; 60 s only bounds a hang.
out=$(timeout 60 "$vs" stat --watch=0.3 2>&1 | awk '/PID  *FD  *PROTO/ && ++n > 3 { exit } { print }')
if [ "$(grep -c 'PID  *FD  *PROTO' <<<"$out")" -ge 3 ] && grep -q "^$pid " <<<"$out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1)); printf 'FAIL stat-watch:\n%s\n' "$out"
fi
kill $pid; wait $pid 2>/dev/null
# exec: a listening socket inherited by a new image is adopted on first use,
# with its state read from the kernel.
"$vs" run -- python3 -c '
import os, socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); s.set_inheritable(True)
os.execv(sys.executable, [sys.executable, "-c", """
import socket, time
s = socket.socket(fileno=%d); s.setblocking(False)
try: s.accept()
except BlockingIOError: pass
print("adopted", flush=True)
time.sleep(30)""" % s.fileno()])' >"$tmp/exec.out" &
pid=$!
start=$SECONDS
# After the new image's first use of the socket: before it, stat may show
# the old image's socket, then (at exec) none.
until grep -q adopted "$tmp/exec.out" || [ $SECONDS -gt $((start + 180)) ]; do sleep 0.1; done
until "$vs" stat --pid $pid 2>/dev/null | grep -q listening || [ $SECONDS -gt $((start + 180)) ]; do sleep 0.1; done
expect exec-adopt 0 "\"pid\":$pid.*\"state\":\"listening\",\"local\":\"127\.0\.0\.1:[0-9]+\"" -- "$vs" stat --json --pid $pid
kill $pid; wait $pid 2>/dev/null

# A process that died without cleaning up leaves a file that stat removes.
expect stat-after-exit 3 'no process' -- "$vs" stat
[ -z "$(ls "$tmp" | grep vsocket-stats)" ] && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL stale file left: $(ls "$tmp")"; }
# A corrupt file in the directory is skipped with a message, never a crash.
head -c 300 /dev/urandom > "$tmp/vsocket-stats.1"
expect stat-corrupt 3 'not a statistics file' -- "$vs" stat

# Pid reuse: a dead process of another user left its file under our pid in
# the sticky /dev/shm, which we may not remove: statistics go on under a
# name with our uid (they were disabled). Pids made small and known by a
# new pid namespace; the program runs as nobody, the leftovers are root's.
if [ "$(id -u)" = 0 ] && unshare --pid --fork --mount-proc true 2>/dev/null; then
  shared=$tmp/sticky
  chmod 755 "$tmp"
  mkdir -m 1777 "$shared"
  for p in $(seq 1 40); do head -c 300 /dev/urandom >"$shared/vsocket-stats.$p"; done
  out=$(VSOCKET_STATS_DIR=$shared timeout 120 unshare --pid --fork --mount-proc \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$vs" run -- /usr/bin/python3 -c '
import os, socket, subprocess, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
r = subprocess.run([sys.argv[1], "stat", "--json", "--pid", str(os.getpid())],
                   capture_output=True, text=True)
print(os.getpid(), r.stdout, r.stderr)' "$vs" 2>&1)
  if grep -q '"state":"listening"' <<<"$out" && ! grep -q 'statistics disabled' <<<"$out"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); printf 'FAIL stat-pid-reuse:\n%s\n' "$out"
  fi
else
  echo "tool_cli: stat-pid-reuse skipped (needs root and a pid namespace)"
fi

echo "tool_cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
