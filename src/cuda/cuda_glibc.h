/* cuda_glibc.h -- binds the library's references to the oldest glibc
 * versions that have them, so one build loads into containers whose glibc is
 * older than the build machine's (glibc 2.34 gave dlopen, pthread_once,
 * pthread_mutex_trylock and the robust-mutex calls new default versions). A
 * library that cannot load from /etc/ld.so.preload is skipped by ld.so with a
 * warning and the process runs without a limit, so this matters. Included
 * first by every file of the library; a ctest (cuda_glibc_versions) checks
 * the result. */
#ifndef GP_CUDA_GLIBC_H
#define GP_CUDA_GLIBC_H

#if defined(__x86_64__)
#define CUDA_GLIBC_BASE "GLIBC_2.2.5"
#define CUDA_GLIBC_ROBUST "GLIBC_2.12"
#elif defined(__aarch64__)
#define CUDA_GLIBC_BASE "GLIBC_2.17"
#define CUDA_GLIBC_ROBUST "GLIBC_2.17"
#endif

#ifdef CUDA_GLIBC_BASE
__asm__(".symver dlopen,dlopen@" CUDA_GLIBC_BASE);
__asm__(".symver dlvsym,dlvsym@" CUDA_GLIBC_BASE);
__asm__(".symver dlclose,dlclose@" CUDA_GLIBC_BASE);
__asm__(".symver pthread_once,pthread_once@" CUDA_GLIBC_BASE);
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@" CUDA_GLIBC_BASE);
__asm__(".symver pthread_mutexattr_init,pthread_mutexattr_init@" CUDA_GLIBC_BASE);
__asm__(".symver pthread_mutexattr_destroy,pthread_mutexattr_destroy@" CUDA_GLIBC_BASE);
__asm__(".symver pthread_mutexattr_setpshared,pthread_mutexattr_setpshared@" CUDA_GLIBC_BASE);
__asm__(".symver pthread_mutexattr_setrobust,pthread_mutexattr_setrobust@" CUDA_GLIBC_ROBUST);
__asm__(".symver pthread_mutex_consistent,pthread_mutex_consistent@" CUDA_GLIBC_ROBUST);
/* The compute sampler's thread (cuda_compute.c): 2.34 and 2.32 versions. */
__asm__(".symver pthread_create,pthread_create@" CUDA_GLIBC_BASE);
__asm__(".symver pthread_sigmask,pthread_sigmask@" CUDA_GLIBC_BASE);
#endif

#endif
