#!/usr/bin/env bash
# Installs what vsocket needs on a bare Debian 12 machine: the build toolchain,
# rdma-core, the real programs the compatibility suite and demo run, and clang
# with libFuzzer for the fuzz targets.
# Usage: scripts/install-deps.sh [build|test|fuzz|package|rdma-guest|all]   (default: all)
# Idempotent: packages already present are not downloaded again.
set -euo pipefail

build_pkgs=(build-essential cmake ninja-build pkg-config libibverbs-dev librdmacm-dev
            rdma-core ibverbs-providers ibverbs-utils clang-format valgrind python3)
# ceph-*: tests/compat/test_ceph.py (issue 19), a single-host cluster; 61 MB of
# archives, 244 MB installed, about a minute. policy-rc.d below keeps their
# services from starting. nfs-ganesha*, rpcbind, libnfs-utils:
# tests/compat/test_nfs.py (issue 25), an ONC RPC file service and its client.
# nsd, dnsperf: tests/udp/test_udp_shm.py (issue 23), a DNS server under a resolver load.
test_pkgs=(iperf3 sockperf redis-server redis-tools nginx-light wrk curl memcached
           libmemcached-tools socat ncat openssh-server openssh-client python3 python3-pytest
           procps iproute2 strace linux-perf groff-base jq rsync gdb file
           ceph-mon ceph-mgr ceph-osd ceph-common
           nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils nsd dnsperf)
# clang 14 and its runtimes (libclang_rt.fuzzer, i.e. libFuzzer, is in libclang-rt-14-dev);
# llvm-14 for llvm-cov and llvm-profdata (tests/fuzz/coverage.sh).
fuzz_pkgs=(clang libclang-rt-14-dev llvm-14)
# `make package` (cpack -G DEB): dpkg-shlibdeps (dpkg-dev) computes Depends,
# and CPack looks at each file with `file` to find the ELF ones. The suite's
# package test builds, installs and reads (man) the package, so `test` has them too.
package_pkgs=(dpkg-dev file man-db)
# default-jdk-headless: tests/rdma/cases/java.sh (a JVM program on RDMA, issue 21),
# its class compiled on the host by the build.
guest_pkgs=(qemu-system-x86 rdmacm-utils perftest kmod busybox-static cpio iproute2 xz-utils jq
            default-jdk-headless)

# Python packages of the compatibility suite's gRPC cases (tests/compat/test_grpc.py),
# pinned, from PyPI, in a venv of Debian's python3 (Debian 12's own python3-grpcio is
# 1.51, whose older poller never showed the bug; pyarrow is not packaged at all).
compat_venv=${VSOCKET_COMPAT_VENV:-$(cd "$(dirname "$0")/.." && pwd)/build/compat-venv}
compat_pypi=(grpcio==1.85.3 pyarrow==26.0.1)
venv_pkgs=(python3-venv)
compat_venv_ready() {
  "$compat_venv/bin/python" - "${compat_pypi[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
}
install_compat_venv() {
  compat_venv_ready && return 0
  echo "install-deps: installing ${compat_pypi[*]} into $compat_venv" >&2
  /usr/bin/python3 -m venv "$compat_venv" &&
    "$compat_venv/bin/pip" install -q --disable-pip-version-check "${compat_pypi[@]}"
}

case "${1:-all}" in
  build) want=("${build_pkgs[@]}") ;;
  test) want=("${build_pkgs[@]}" "${test_pkgs[@]}" "${fuzz_pkgs[@]}" "${package_pkgs[@]}" "${venv_pkgs[@]}") ;;
  fuzz) want=("${build_pkgs[@]}" "${fuzz_pkgs[@]}") ;;
  package) want=("${build_pkgs[@]}" "${package_pkgs[@]}") ;;
  rdma-guest) want=("${build_pkgs[@]}" "${guest_pkgs[@]}") ;;
  all) want=("${build_pkgs[@]}" "${test_pkgs[@]}" "${fuzz_pkgs[@]}" "${package_pkgs[@]}" "${guest_pkgs[@]}"
       "${venv_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test|fuzz|package|rdma-guest|all]" >&2; exit 2 ;;
esac

venv=0
case "${1:-all}" in test | all) venv=1 ;; esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  [ $venv -eq 0 ] || install_compat_venv
  exit
fi

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -E "$@"; fi; }
# apt has been seen to lose its temporary files under /tmp while upgrading
# systemd; a private TMPDIR avoids that.
export TMPDIR="${VSOCKET_APT_TMPDIR:-/var/tmp/vsocket-apt}"
mkdir -p "$TMPDIR"
export DEBIAN_FRONTEND=noninteractive
# Servers installed for the tests must not start as system services: they
# would hold default ports and outlive the test run.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
  as_root chmod +x "$policy"
  created_policy=1
fi
trap '[ $created_policy -eq 1 ] && as_root rm -f "$policy"' EXIT

echo "install-deps: installing ${missing[*]}" >&2
as_root apt-get update -qq
as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[ $venv -eq 0 ] || install_compat_venv
