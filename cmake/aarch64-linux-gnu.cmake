# aarch64-linux-gnu.cmake -- cross-compiles gpupool for 64-bit Arm Linux (arm64)
# on a Debian amd64 host, with Debian's cross toolchain and multiarch libraries:
#
#   scripts/install-deps.sh --cross     gcc/g++-aarch64-linux-gnu, the :arm64 -dev
#                                       package of every library linked, qemu-user-static
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   (or: make cross, which also runs the smoke test, scripts/cross.sh)
#
# No sysroot: multiarch installs the arm64 libraries beside the host's, in
# /usr/lib/aarch64-linux-gnu, with their headers in /usr/include (shared) and
# /usr/include/aarch64-linux-gnu; the cross compiler searches both. Build-time
# tools (protoc-c, python3) are the host's. Test programs run through qemu-user
# (CMAKE_CROSSCOMPILING_EMULATOR), so ctest works in a cross build tree too.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(GP_CROSS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${GP_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${GP_CROSS_TRIPLET}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${GP_CROSS_TRIPLET})

# Libraries and headers: the target's multiarch directories only (never the
# host's x86-64 libraries); programs: the host's.
set(CMAKE_FIND_ROOT_PATH /usr/${GP_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config with Debian's cross personality: it reads only
# /usr/lib/aarch64-linux-gnu/pkgconfig (and the arch-independent
# /usr/share/pkgconfig), so every pkg_check_modules() and the static gRPC
# link line name arm64 libraries.
find_program(PKG_CONFIG_EXECUTABLE ${GP_CROSS_TRIPLET}-pkg-config REQUIRED)

# qemu-user runs what the build produces (ctest, scripts/cross.sh). No -L
# /usr/aarch64-linux-gnu: that prefix holds the cross toolchain's loader
# (libc6-arm64-cross), a different glibc build from the multiarch libc6:arm64
# the programs' libraries pull in, and the two together hang in the first
# pthread_create. Without -L the loader is libc6:arm64's /lib/ld-linux-aarch64.so.1.
find_program(GP_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(GP_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${GP_QEMU_AARCH64})
endif()
