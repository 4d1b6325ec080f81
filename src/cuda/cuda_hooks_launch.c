/* cuda_hooks_launch.c -- every kernel launch entry point of the driver, with
 * the compute gate in front (cuda_compute.h); cuGraphLaunch is with the
 * other graph wrappers (cuda_hooks_pool.c). Nothing else changes: the
 * arguments go to the driver untouched. */
#include "cuda_glibc.h"
#include "cuda_account.h"
#include "cuda_compute.h"
#include "cuda_real.h"

CUDA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                    CUstream s, void **params, void **extra)
{
    NEED(cuLaunchKernel);
    COMPUTE_GATE(s);
    return real.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUDA_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                         unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                         CUstream s, void **params, void **extra)
{
    NEED(cuLaunchKernel_ptsz);
    COMPUTE_GATE(s);
    return real.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

CUDA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                      void **extra)
{
    NEED(cuLaunchKernelEx);
    COMPUTE_GATE(config != NULL ? config->hStream : NULL);
    return real.cuLaunchKernelEx(config, f, params, extra);
}

CUDA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                           void **params, void **extra)
{
    NEED(cuLaunchKernelEx_ptsz);
    COMPUTE_GATE(config != NULL ? config->hStream : NULL);
    return real.cuLaunchKernelEx_ptsz(config, f, params, extra);
}

CUDA_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                               unsigned bx, unsigned by, unsigned bz,
                                               unsigned shared, CUstream s, void **params)
{
    NEED(cuLaunchCooperativeKernel);
    COMPUTE_GATE(s);
    return real.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, s, params);
}

CUDA_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                    unsigned gz, unsigned bx, unsigned by,
                                                    unsigned bz, unsigned shared, CUstream s,
                                                    void **params)
{
    NEED(cuLaunchCooperativeKernel_ptsz);
    COMPUTE_GATE(s);
    return real.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shared, s, params);
}
