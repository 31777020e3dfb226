#!/bin/sh
# test_layers.sh ROOT BUILD CC - the house rule holds in ROOT/src, its
# includes and the calls of the objects built in BUILD (scripts/check-layers),
# and the check can fail: on copies of src/ given one include that reaches
# up a floor, and one between the sibling transports, it must fail and name
# the file and line; given one that reaches down, it must pass; on two
# objects (built here with CC) of which the lower calls the upper's close(),
# it must fail and name the call.
set -u
root=$1 build=$2 cc=$3
check="$root/scripts/check-layers"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

if ! "$check" --objects "$build" "$root/src"; then
    echo "FAIL: src/ against its floors (above)"
    fail=1
fi

# VERDICT FILE INCLUDE [EXPECTED]: a fresh copy of src/ with INCLUDE appended to
# FILE; "up" must fail with EXPECTED in the output, "down" must pass.
try() {
    verdict=$1 file=$2 include=$3 expected=${4:-}
    rm -rf "$tmp/src"
    cp -R "$root/src" "$tmp/src"
    printf '#include "%s"\n' "$include" >>"$tmp/src/$file"
    out=$("$check" "$tmp/src" 2>&1)
    rc=$?
    case $verdict in
    up)
        if [ $rc -ne 1 ]; then
            echo "FAIL: $file including $include passed the check (rc $rc)"
            fail=1
        elif ! printf '%s\n' "$out" | grep -qF "$expected"; then
            echo "FAIL: $file including $include: the report does not say '$expected':"
            printf '%s\n' "$out"
            fail=1
        else
            echo "ok: refused: $(printf '%s\n' "$out" | grep -F "$expected")"
        fi
        ;;
    down)
        if [ $rc -ne 0 ]; then
            echo "FAIL: $file including $include was refused:"
            printf '%s\n' "$out"
            fail=1
        else
            echo "ok: $file including $include is allowed"
        fi
        ;;
    esac
}

lines() { wc -l <"$root/src/$1" | tr -d ' '; }

try up base/real.h interpose/init.h "base/real.h:$(($(lines base/real.h) + 1)): includes interpose/init.h"
try up core/sock.c readiness/epoll.h "core/sock.c:$(($(lines core/sock.c) + 1)): includes readiness/epoll.h"
try up transport/shm/io.c transport/rdma/conn.h "transport/shm/io.c:$(($(lines transport/shm/io.c) + 1)): includes transport/rdma/conn.h"
try up memory/ring.c config/config.h "memory/ring.c:$(($(lines memory/ring.c) + 1)): includes config/config.h"
try down readiness/epoll.c base/real.h

# A directory the table does not place is refused: a new one needs a floor.
rm -rf "$tmp/src"
cp -R "$root/src" "$tmp/src"
mkdir "$tmp/src/attic"
echo '/* nothing */' >"$tmp/src/attic/x.c"
if "$check" "$tmp/src" >/dev/null 2>&1; then
    echo "FAIL: a file in a directory without a floor passed the check"
    fail=1
else
    echo "ok: a directory without a floor is refused"
fi

# A call up that no include shows: a file below interpose/ calling close(),
# which binds to our own wrapper of it.
mkdir -p "$tmp/calls/src/core" "$tmp/calls/src/interpose" "$tmp/calls/build/t.dir/core" \
    "$tmp/calls/build/t.dir/interpose"
printf 'int close(int);\nint lower(void) { return close(-1); }\n' >"$tmp/calls/src/core/lower.c"
printf 'int close(int fd) { return fd; }\n' >"$tmp/calls/src/interpose/wrap.c"
"$cc" -c -o "$tmp/calls/build/t.dir/core/lower.c.o" "$tmp/calls/src/core/lower.c" &&
    "$cc" -c -o "$tmp/calls/build/t.dir/interpose/wrap.c.o" "$tmp/calls/src/interpose/wrap.c" ||
    fail=1
out=$("$check" --objects "$tmp/calls/build" "$tmp/calls/src" 2>&1)
rc=$?
expected="core/lower.c: calls close, defined in interpose/wrap.c"
if [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -qF "$expected"; then
    echo "ok: refused: $(printf '%s\n' "$out" | grep -F "$expected")"
else
    echo "FAIL: a call up to a wrapper was not refused as '$expected' (rc $rc):"
    printf '%s\n' "$out"
    fail=1
fi

exit $fail
