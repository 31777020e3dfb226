# The Debian package (`make package`; cpack -G DEB in a build directory).
# One package, vsocket: the preload library, the tool, the man pages and
# vsocket.pc, at the paths the build was configured with. `make package`
# configures with CMAKE_INSTALL_PREFIX=/usr, so the library lands in the
# multiarch directory (/usr/lib/x86_64-linux-gnu): a standard search
# directory of the loader, which is what an administrator needs to preload it
# into set-user-ID programs (README.md, "Set-user-ID and capability programs").
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME vsocket)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "vsocket maintainers <maintainers@users.noreply.a-seed-82d8be70.example>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "TCP over shared memory and RDMA for unmodified socket programs")
set(CPACK_PACKAGE_DESCRIPTION
    "vsocket is a library loaded into a program with LD_PRELOAD (or `vsocket run`)
that carries the program's TCP connections over shared memory when both ends
are on this host, and over RDMA RC between hosts, falling back to kernel TCP
whenever it must. Programs keep their sockets, errors and blocking behaviour.
The package holds libvsocket.so, the vsocket tool (run, stat, doctor), the
man pages vsocket(1) and vsocket(7), and vsocket.pc.")
# The files' paths are the configured ones: a package built from a
# /usr/local build says /usr/local in vsocket.pc and in the tool.
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
# What users run: the default component only. The test and benchmark programs
# (vsocket-stress, vsocket-sweep: component "bench") stay with `make install`.
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};${PROJECT_NAME};Unspecified;/")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.invalid/vsocket")
# Depends from the ELF files' needs (dpkg-shlibdeps): libc6, libibverbs1,
# librdmacm1.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The verbs providers (rxe, mlx5, ...) are what libibverbs opens at run time:
# without one RDMA is never used, and vsocket doctor says so.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ibverbs-providers")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "rdma-core")
# ldconfig after install and removal, so that the loader's cache knows the
# library (LD_PRELOAD=libvsocket.so without a path needs it).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# Debian strips what it ships; the build tree keeps the debug information.
set(CPACK_STRIP_FILES ON)
include(CPack)
