#!/bin/sh
# ctest entry point: run.sh PATH/TO/vsocket
# Runs the rendezvous security tests (pytest) against that build.
set -e
here=$(cd "$(dirname "$0")" && pwd)
VSOCKET=${1:?usage: run.sh PATH/TO/vsocket}
export VSOCKET
exec python3 -m pytest -q -p no:cacheprovider -rxX "$here"
