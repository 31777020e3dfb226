#!/usr/bin/env bash
# test_package.sh SOURCE_DIR WORK_DIR [DEB] - the Debian package, installed
# and used on a copy-on-write view of this machine, then removed.
#
# Builds the package as `make package` does (WORK_DIR/build, configured for
# /usr), unless DEB names one to test instead. Then, in a private mount
# namespace, mounts an overlay whose lower layer is / and whose upper layer
# is a tmpfs, and chroots into it: dpkg writes only to the tmpfs, and the
# namespace, its mounts and the tmpfs go away with the test's last process,
# however it ends. There it checks that
#   * dpkg -i installs it, and dpkg -L lists the library, the tool, both man
#     pages and vsocket.pc, present on disk; Depends names libibverbs1 and
#     librdmacm1 (dpkg-shlibdeps ran); pkg-config and man find them;
#   * the installed `vsocket doctor` runs and reports this version;
#   * a Python echo server under `vsocket run` and a client with
#     LD_PRELOAD=libvsocket.so (the bare name, through the loader's cache)
#     load the package's library, exchange 1 MiB intact, and `vsocket stat`
#     shows their connection on shm (tests/package/drive.py);
#   * the administrator's step for set-user-ID programs (README.md): a
#     set-user-ID copy of python3, run by nobody with
#     LD_PRELOAD=libvsocket.so, loads the library only once it has the
#     set-user-ID bit (glibc's secure-execution rule), and then ignores
#     VSOCKET_LOG_FILE and VSOCKET_STATS_DIR, paths from the unprivileged
#     caller;
#   * dpkg -r removes every file it installed, and the loader forgets it.
# Needs root and overlayfs; exits 77 (skipped, with the reason) only when
# either is missing.
set -u
[ -n "${PKGTEST_TRACE:-}" ] && { PS4="+ \$SECONDS "; set -x; }

if [ "${1:-}" = --inside ]; then
  inside=1
  shift
else
  inside=0
fi

failed=0
fail() {
  echo "FAIL $*"
  failed=$((failed + 1))
}

# ---------------------------------------------------------------- outside
# Build the package, check the machine can mount an overlay, and run the
# rest of this script in its own mount namespace.
outside() {
  local src=$1 work=$2 deb=${3:-}
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP: needs root (mount namespaces, overlayfs, dpkg in a chroot)"
    exit 77
  fi
  local probe
  probe=$(unshare --mount --propagation private sh -c \
    'd=$(mktemp -d) && mount -t tmpfs tmpfs "$d" && mkdir "$d/u" "$d/w" "$d/m" &&
     mount -t overlay overlay -o lowerdir=/,upperdir="$d/u",workdir="$d/w" "$d/m" &&
     umount "$d/m" "$d" && rmdir "$d"' 2>&1)
  if [ $? != 0 ]; then
    echo "SKIP: this machine cannot mount an overlay over / in a mount namespace: $probe"
    exit 77
  fi
  if [ -z "$deb" ]; then
    local start=$SECONDS
    cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF >/dev/null &&
      cmake --build "$work/build" >/dev/null &&
      (cd "$work/build" && rm -f vsocket_*.deb && cpack -G DEB >/dev/null) ||
      { echo "FAIL building the package in $work/build"; exit 1; }
    deb=$(ls "$work/build"/vsocket_*.deb)
    echo "built $deb in $((SECONDS - start)) s"
  fi
  [ -f "$deb" ] || { echo "FAIL no package at $deb"; exit 1; }
  local mnt rc
  # In WORK_DIR, not /tmp: a test killed by its time limit leaves only an
  # empty directory there (its mounts go with its namespace).
  mkdir -p "$work"
  mnt=$(mktemp -d "$work/mnt.XXXXXX")
  unshare --mount --propagation private "$0" --inside "$src" "$mnt" "$(realpath "$deb")"
  rc=$?
  rmdir "$mnt"
  exit $rc
}

# ----------------------------------------------------------------- inside
# Runs in the private mount namespace: nothing mounted here is seen outside.
inside() {
  local src=$1 mnt=$2 deb=$3
  mount -t tmpfs vsocket-package "$mnt" && mkdir "$mnt/upper" "$mnt/work" "$mnt/root" &&
    mount -t overlay overlay -o lowerdir=/,upperdir="$mnt/upper",workdir="$mnt/work" "$mnt/root" ||
    { echo "FAIL mounting the overlay"; exit 1; }
  root=$mnt/root
  # The overlay shows /'s own files only: the kernel's file systems are
  # bound in; /dev/shm is a fresh tmpfs, so `vsocket stat` sees only the
  # processes of this test.
  mount --bind /proc "$root/proc" && mount --bind /sys "$root/sys" &&
    mount --bind /dev "$root/dev" && mount -t tmpfs -o mode=1777 shm "$root/dev/shm" ||
    { echo "FAIL binding /proc, /sys, /dev into the overlay"; exit 1; }
  in_root() { chroot "$root" "$@"; }

  # A `make install` copy in /usr/local would come first in the loader's
  # cache and on PATH: take it away in this view, so that what runs below
  # can only be the package's.
  rm -f "$root"/usr/local/lib/libvsocket.so* "$root"/usr/local/bin/vsocket
  in_root dpkg --purge vsocket >/dev/null 2>&1
  in_root ldconfig

  mkdir -p "$root/root/vsocket-package"
  cp "$deb" "$root/root/vsocket-package/vsocket.deb"
  cp "$src/tests/package/echo.py" "$src/tests/package/drive.py" "$root/root/vsocket-package/"

  local out ma
  out=$(in_root dpkg -i /root/vsocket-package/vsocket.deb 2>&1) ||
    { echo "FAIL dpkg -i: $out"; exit 1; }
  ma=$(in_root dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || in_root gcc -print-multiarch)
  check_installed "$ma"
  check_use "$ma"
  check_secure "$ma"
  check_removed
  [ "$failed" = 0 ] && echo "package: ok (installed, used, removed: $(basename "$deb"))"
  exit $((failed > 0))
}

check_installed() {
  local ma=$1 f
  mapfile -t listed < <(in_root dpkg -L vsocket)
  for f in /usr/bin/vsocket "/usr/lib/$ma/libvsocket.so" "/usr/lib/$ma/libvsocket.so.0" \
    /usr/share/man/man1/vsocket.1 /usr/share/man/man7/vsocket.7 "/usr/lib/$ma/pkgconfig/vsocket.pc"; do
    printf '%s\n' "${listed[@]}" | grep -qx "$f" || fail "dpkg -L vsocket does not list $f"
    [ -e "$root$f" ] || fail "$f is listed but not on disk"
  done
  local depends
  depends=$(in_root dpkg-query -W -f='${Depends}' vsocket)
  for d in libc6 libibverbs1 librdmacm1; do
    [[ ", $depends" == *", $d "* ]] || fail "Depends lacks $d: '$depends'"
  done
  [ "$(in_root pkg-config --variable=libdir vsocket)" = "/usr/lib/$ma" ] ||
    fail "pkg-config --variable=libdir vsocket: '$(in_root pkg-config --variable=libdir vsocket)'"
  MANWIDTH=80 in_root man 7 vsocket 2>/dev/null | grep -q VSOCKET_TRANSPORTS ||
    fail "man 7 vsocket does not show VSOCKET_TRANSPORTS"
  MANWIDTH=80 in_root man 1 vsocket 2>/dev/null | grep -q 'vsocket doctor' ||
    fail "man 1 vsocket does not show 'vsocket doctor'"
}

check_use() {
  local ma=$1 out rc version
  # 0: everything usable, 4: something missing (no RDMA device here).
  out=$(in_root /usr/bin/vsocket doctor 2>&1)
  rc=$?
  version=$(sed -n 's/^project(vsocket VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
  [ "$rc" = 0 ] || [ "$rc" = 4 ] || fail "vsocket doctor exited $rc: $out"
  grep -q "^This build (vsocket $version)" <<<"$out" || fail "vsocket doctor: no version $version: $out"
  grep -q "libibverbs.so.1 loads" <<<"$out" || fail "vsocket doctor: libibverbs does not load: $out"
  # Only a hang reaches the time limit: the exchange takes well under a second.
  in_root timeout 600 /usr/bin/python3 /root/vsocket-package/drive.py \
    /root/vsocket-package/echo.py "/usr/lib/$ma" || fail "the echo through the installed package"
}

# Runs a set-user-ID root copy of python3 as nobody with the library in
# LD_PRELOAD by its bare name; prints the euid and the libvsocket it loaded.
run_setuid() {
  in_root setpriv --reuid=nobody --regid=nogroup --clear-groups \
    env -i PATH=/usr/bin:/bin LD_PRELOAD=libvsocket.so VSOCKET_LOG_LEVEL=info \
    VSOCKET_LOG_FILE=/var/tmp/vsocket-secure.log VSOCKET_STATS_DIR=/var/tmp \
    /usr/local/bin/vsocket-setuid-python -c '
import os
libs = [l.split()[-1] for l in open("/proc/self/maps") if "libvsocket" in l]
print("euid=%d lib=%s" % (os.geteuid(), libs[0] if libs else "none"))' 2>&1
}

check_secure() {
  local lib out
  lib=$(realpath "$root/usr/lib/$1/libvsocket.so")
  lib=${lib#"$root"}
  cp -L "$root/usr/bin/python3" "$root/usr/local/bin/vsocket-setuid-python"
  chmod 4755 "$root/usr/local/bin/vsocket-setuid-python"
  out=$(run_setuid)
  grep -q "^euid=0 lib=none$" <<<"$out" ||
    fail "a set-user-ID program loaded the library without its set-user-ID bit: $out"
  # The administrator's step (README.md, "Set-user-ID and capability programs").
  chmod u+s "$root$lib"
  out=$(run_setuid)
  grep -q "^euid=0 lib=$lib$" <<<"$out" ||
    fail "a set-user-ID program did not load $lib with its set-user-ID bit: $out"
  [ -e "$root/var/tmp/vsocket-secure.log" ] &&
    fail "a set-user-ID program wrote the log file its caller named (VSOCKET_LOG_FILE)"
  grep -q "VSOCKET_LOG_FILE ignored in a set-user-ID" <<<"$out" ||
    fail "no warning that VSOCKET_LOG_FILE was ignored: $out"
  grep -q "VSOCKET_STATS_DIR ignored in a set-user-ID" <<<"$out" ||
    fail "no warning that VSOCKET_STATS_DIR was ignored: $out"
  chmod u-s "$root$lib"
  rm -f "$root/usr/local/bin/vsocket-setuid-python" "$root/var/tmp/vsocket-secure.log"
}

check_removed() {
  local out f
  out=$(in_root dpkg -r vsocket 2>&1) || fail "dpkg -r vsocket: $out"
  for f in "${listed[@]}"; do
    # Directories such as /usr/bin stay; every file and link goes.
    [ -d "$root$f" ] && [ ! -L "$root$f" ] && continue
    [ -e "$root$f" ] || [ -L "$root$f" ] && fail "$f is still there after dpkg -r"
  done
  in_root ldconfig -p | grep -q libvsocket && fail "the loader's cache still lists libvsocket"
  in_root dpkg-query -W -f='${Status}' vsocket 2>/dev/null | grep -q 'install ok installed' &&
    fail "dpkg still says vsocket is installed"
}

if [ $inside = 1 ]; then
  inside "$@"
else
  outside "$@"
fi
