#!/bin/sh
# ctest entry point: run.sh PATH/TO/vsocket [TEST FILE...]
# Runs the security tests (pytest) against that build: the given files of
# this directory, or all of them. Exit status 77 when every test was
# skipped (conftest.py; ctest: SKIP_RETURN_CODE), the reasons in the output.
set -e
here=$(cd "$(dirname "$0")" && pwd)
VSOCKET=${1:?usage: run.sh PATH/TO/vsocket [TEST FILE...]}
export VSOCKET
shift
files=
for f in "$@"; do files="$files $here/$f"; done
export VSOCKET_ALL_SKIPPED_RC=77
# shellcheck disable=SC2086
exec python3 -m pytest -q -p no:cacheprovider -rsxX ${files:-$here}
