#!/usr/bin/env bash
# test_unseen.sh VSOCKET - programs vsocket cannot see (static, Go): `vsocket
# run` says so in exactly one line and still runs them unchanged; `vsocket
# doctor PROGRAM` explains. Ordinary dynamic programs get no such line.
set -u
vs=$1
passed=0 failed=0 skipped=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export VSOCKET_STATS_DIR=$tmp

fail() {
  failed=$((failed + 1))
  printf 'FAIL %s\n' "$*"
}
skip() {
  skipped=$((skipped + 1))
  printf 'SKIP %s\n' "$*"
}

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
    fail "$name: exit $rc (want $code), output:"
    printf '%s\n' "$out"
  fi
}

unseen_line() { # PROGRAM REASON: the line run prints for PROGRAM
  printf 'vsocket: %s %s; it runs unaccelerated (see: vsocket doctor %s)' "$1" "$2" "$1"
}
GO_REASON='is a Go program: it makes system calls without libc, so vsocket cannot see its sockets'
STATIC_REASON='is statically linked: it has no dynamic loader to load vsocket (LD_PRELOAD), so vsocket cannot see its sockets'

# run_once NAME LINE CODE OUTPUT -- COMMAND...: COMMAND exits CODE, prints
# OUTPUT (it ran), and LINE appears exactly once; no other "unaccelerated" line.
run_once() {
  local name=$1 line=$2 code=$3 want=$4
  shift 5
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -eq "$code" ] && grep -qF -- "$want" <<<"$out" &&
    [ "$(grep -cxF -- "$line" <<<"$out")" -eq 1 ] &&
    [ "$(grep -c unaccelerated <<<"$out")" -eq 1 ]; then
    passed=$((passed + 1))
  else
    fail "$name: exit $rc (want $code), want once: $line"
    printf 'output:\n%s\n' "$out"
  fi
}

# run_silent NAME -- COMMAND...: no line about being unaccelerated.
run_silent() {
  local name=$1
  shift 2
  local out
  out=$("$@" 2>&1)
  if grep -qE 'unaccelerated|vsocket doctor' <<<"$out"; then
    fail "$name: a line for a program vsocket can see:"
    printf '%s\n' "$out"
  else
    passed=$((passed + 1))
  fi
}

expect run-help-mentions 0 'Go programs' -- "$vs" run --help
expect doctor-help-mentions 0 'usage: vsocket doctor \[--rdma \| PROGRAM\]' -- "$vs" doctor --help

# Ordinary dynamic programs, and scripts they run: nothing new.
run_silent true -- "$vs" run -- /bin/true
run_silent true-path -- "$vs" run -- true
printf '#!/bin/sh\necho script-ran\n' >"$tmp/script.sh"
chmod +x "$tmp/script.sh"
run_silent sh-script -- "$vs" run -- "$tmp/script.sh"
expect doctor-true 0 'dynamically linked program \(64-bit ELF\), interpreter /.*\(glibc\)' -- "$vs" doctor /bin/true
expect doctor-true-can 0 'vsocket: can interpose' -- "$vs" doctor true

# Files we cannot judge: no line, whatever happens next.
printf 'not a program\n' >"$tmp/text"
chmod +x "$tmp/text"
run_silent text -- "$vs" run -- "$tmp/text"
expect doctor-text 0 'neither an ELF file nor a #! script' -- "$vs" doctor "$tmp/text"

# Not found: a clear error and non-zero exit.
expect doctor-not-found 127 'no-such-program-xyz: command not found' -- "$vs" doctor no-such-program-xyz
expect doctor-not-found-path 127 '/nonexistent/prog: No such file' -- "$vs" doctor /nonexistent/prog
expect doctor-two 2 'one program at a time' -- "$vs" doctor /bin/true /bin/true

# A static C program: built here if glibc's static libraries are installed,
# else the system's static ldconfig.
static=
printf '#include <stdio.h>\nint main(void) { puts("static-ran"); return 3; }\n' >"$tmp/s.c"
mkdir -p "$tmp/bin"
if cc -static -o "$tmp/bin/static-prog" "$tmp/s.c" 2>"$tmp/cc.err"; then
  static=$tmp/bin/static-prog
  run_once static "$(unseen_line "$static" "$STATIC_REASON")" 3 static-ran -- "$vs" run -- "$static"
  run_once static-path "$(unseen_line "$static" "$STATIC_REASON")" 3 static-ran -- \
    env PATH="$tmp/bin:$PATH" "$vs" run -- static-prog
  # Cut short after its ELF header: not judged.
  head -c 100 "$static" >"$tmp/truncated"
  chmod +x "$tmp/truncated"
  run_silent truncated -- "$vs" run -- "$tmp/truncated"
  # A script run by it is as unseen as its interpreter.
  printf '#!%s\n' "$static" >"$tmp/static-script"
  chmod +x "$tmp/static-script"
  run_once static-script "vsocket: $tmp/static-script runs under $static, which $STATIC_REASON; it runs unaccelerated (see: vsocket doctor $tmp/static-script)" \
    3 static-ran -- "$vs" run -- "$tmp/static-script"
  expect doctor-static-script 4 "a #! script run by $static" -- "$vs" doctor "$tmp/static-script"
else
  for f in /sbin/ldconfig.real /sbin/ldconfig; do
    if [ -x "$f" ] && ! readelf -l "$f" 2>/dev/null | grep -q INTERP; then static=$f; break; fi
  done
  [ -n "$static" ] && run_once ldconfig "$(unseen_line "$static" "$STATIC_REASON")" 0 '' -- \
    "$vs" run -- "$static" -p
fi
if [ -n "$static" ]; then
  expect doctor-static 4 'kind: a statically linked program' -- "$vs" doctor "$static"
  expect doctor-static-do 4 'what to do: relink it dynamically' -- "$vs" doctor "$static"
else
  skip "static: cc -static failed ($(head -1 "$tmp/cc.err")) and no static ldconfig"
fi
if cc -o "$tmp/dynamic-prog" "$tmp/s.c" 2>/dev/null; then
  run_silent dynamic-c -- "$vs" run -- "$tmp/dynamic-prog"
  # Set-user-ID to another user: the loader's secure mode drops LD_PRELOAD.
  # Set-user-ID to ourselves changes nothing: no line.
  cp "$tmp/dynamic-prog" "$tmp/setuid-self"
  chmod 4755 "$tmp/setuid-self"
  run_silent setuid-self -- "$vs" run -- "$tmp/setuid-self"
  expect doctor-setuid-self 0 'note: it is set-user-ID or set-group-ID' -- "$vs" doctor "$tmp/setuid-self"
  if [ "$(id -u)" = 0 ]; then
    cp "$tmp/dynamic-prog" "$tmp/setuid-nobody"
    chown nobody "$tmp/setuid-nobody"
    chmod 4755 "$tmp/setuid-nobody"
    run_once setuid-other "vsocket: $tmp/setuid-nobody is set-user-ID or set-group-ID: run by you, the loader ignores LD_PRELOAD for it (secure mode), so it runs unaccelerated (see: vsocket doctor $tmp/setuid-nobody)" \
      3 static-ran -- "$vs" run -- "$tmp/setuid-nobody"
    expect doctor-setuid-other 4 'vsocket: NOT LOADED when you run it: it is set-user-ID' -- "$vs" doctor "$tmp/setuid-nobody"
  else
    skip "setuid-other: needs root to give a program to another user"
  fi
fi

# Go: a static program (no cgo) and a dynamically linked one (cgo): both make
# their socket calls without libc.
go_build() { # DIR CGO [FLAGS]: builds DIR/prog; the source imports C when CGO=1
  local dir=$1 cgo=$2 flags=${3:-}
  mkdir -p "$dir"
  printf 'module unseen\n\ngo 1.18\n' >"$dir/go.mod"
  {
    printf 'package main\n\n'
    [ "$cgo" = 1 ] && printf 'import "C"\n\n'
    printf 'import (\n\t"fmt"\n\t"net"\n)\n\n'
    printf 'func main() {\n\tl, err := net.Listen("tcp", "127.0.0.1:0")\n'
    printf '\tif err != nil {\n\t\tpanic(err)\n\t}\n\tl.Close()\n\tfmt.Println("go-ran")\n}\n'
  } >"$dir/main.go"
  (cd "$dir" && CGO_ENABLED=$cgo GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-buildvcs=false \
    go build $flags -o prog . >build.log 2>&1)
}
if ! command -v go >/dev/null; then
  skip "go: no go on PATH"
else
  [ -n "$(go env GOCACHE 2>/dev/null)" ] || export GOCACHE=$tmp/gocache
  # go0nobid: without a build ID there is no Go note (reproducible builds
  # link so); the .go.buildinfo section still tells.
  for cgo in 0 1 0nobid; do
    dir=$tmp/go$cgo
    if ! go_build "$dir" "${cgo%nobid}" "$([ "$cgo" = 0nobid ] && echo -ldflags=-buildid=)"; then
      skip "go $cgo: build failed: $(head -3 "$dir/build.log")"
      continue
    fi
    run_once go$cgo "$(unseen_line "$dir/prog" "$GO_REASON")" 0 go-ran -- "$vs" run -- "$dir/prog"
    expect doctor-go$cgo-do 4 'what to do: nothing at the libc level' -- "$vs" doctor "$dir/prog"
  done
  [ -x "$tmp/go0/prog" ] && expect doctor-go-static 4 'kind: a Go program \(64-bit ELF\), statically linked' -- "$vs" doctor "$tmp/go0/prog"
  [ -x "$tmp/go1/prog" ] && expect doctor-go-dynamic 4 'kind: a Go program \(64-bit ELF\), dynamically linked, interpreter /' -- "$vs" doctor "$tmp/go1/prog"
fi

echo "tool_unseen: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
