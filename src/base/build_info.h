/* build_info.h -- what a program says about its own build.
 *
 * The revision is the git commit of the source tree, read once when CMake
 * configures the build (CMakeLists.txt; the configure step re-runs when the
 * checkout's HEAD moves), or -DGP_REVISION=... given to CMake for a build
 * outside a checkout (a source tarball, an image build); "unknown" when
 * neither says. It lives in one generated source file so that a new commit
 * recompiles that file alone, not every file of the tree. */
#ifndef GP_BUILD_INFO_H
#define GP_BUILD_INFO_H

extern const char gp_build_revision[];

#endif
