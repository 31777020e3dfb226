#!/usr/bin/env bash
# test_man.sh BUILD_DIR SOURCE_DIR - the generated man pages: groff reads them
# without a warning, they are ASCII, vsocket(7) documents every VSOCKET_*
# variable the sources read, and vsocket(1) every command of `vsocket help`.
set -u
build=$1 src=$2
m1=$build/share/man/man1/vsocket.1
m7=$build/share/man/man7/vsocket.7
failed=0
fail() { echo "FAIL $*"; failed=$((failed + 1)); }

for m in "$m1" "$m7"; do
  [ -s "$m" ] || { fail "$m: missing (built by the 'man' target)"; continue; }
  warn=$(groff -man -Tutf8 -ww -z "$m" 2>&1)
  [ -z "$warn" ] || fail "$m: groff warns: $warn"
  LC_ALL=C grep -nP '[^\x00-\x7f]' "$m" && fail "$m: not ASCII (lines above)"
done

# Every VSOCKET_* name in the sources, as an entry of ENVIRONMENT (.TP) or,
# for the test harness's, at least mentioned.
mapfile -t vars < <(grep -rhoE '"VSOCKET_[A-Z0-9_]+"' "$src/src" | tr -d '"' | sort -u)
[ ${#vars[@]} -ge 10 ] || fail "found only ${#vars[@]} VSOCKET_* names in $src/src"
for v in "${vars[@]}"; do
  grep -qF "\\fB$v\\fR" "$m7" 2>/dev/null || fail "vsocket(7) does not document $v"
done

# Every VSOCKET_* variable of docs/configuration.md's table, as an entry of
# vsocket(7)'s ENVIRONMENT (a .TP line naming it), so the page and the
# reference cannot drift apart.
mapfile -t documented < <(grep -oE '^\| `VSOCKET_[A-Z0-9_]+`' "$src/docs/configuration.md" | tr -d '|` ')
[ ${#documented[@]} -ge 10 ] || fail "found only ${#documented[@]} variables in docs/configuration.md's table"
for v in "${documented[@]}"; do
  grep -A1 -x '.TP' "$m7" 2>/dev/null | grep -qxF "\\fB$v\\fR" || fail "vsocket(7) has no entry for $v"
done

# And every VSOCKET_* name the reference mentions elsewhere (the harness's),
# at least mentioned.
for v in $(grep -oE 'VSOCKET_[A-Z0-9_]+' "$src/docs/configuration.md" | sort -u); do
  grep -qF "$v" "$m7" 2>/dev/null || fail "vsocket(7) does not mention $v (docs/configuration.md does)"
done

# Every command that has its own help, as a subsection of vsocket(1).
for cmd in $("$build/bin/vsocket" help | sed -n '/^Commands:/,/^$/s/^  \([a-z]*\) .*/\1/p'); do
  "$build/bin/vsocket" help "$cmd" 2>/dev/null | grep -q "^usage: vsocket $cmd" || continue
  grep -qx ".SS $cmd" "$m1" 2>/dev/null || fail "vsocket(1) has no section for '$cmd'"
done

# What a reader sees: the page renders, with its NAME line.
MANWIDTH=80 man -l "$m7" 2>/dev/null | grep -qE 'vsocket +- +TCP +over +shared' ||
  fail "man -l $m7 does not show the NAME line"
[ "$failed" = 0 ] && echo "man pages: ok (${#vars[@]} variables of the sources, ${#documented[@]} of docs/configuration.md documented)"
exit $((failed > 0))
