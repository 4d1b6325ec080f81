/* gpupool-fakecuda-timeline FILE: prints what a FAKECUDA_TIMELINE file
 * says, for tests and benches to compute each process's share of the
 * simulated device without trusting wall clocks of their own:
 *   now <ns>
 *   proc <pid> busy=<ns> wait=<ns> kernels=<n>
 * busy is the device time the process's kernels ran until now (kernels
 * reserved further ahead are not counted yet). Exit 1 when the file cannot
 * be read. */
#include "fakecuda_timeline.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gpupool-fakecuda-timeline FILE\n");
        return 2;
    }
    struct fc_tl tl;
    char why[600];
    if (fc_tl_open(&tl, argv[1], why, sizeof why) != 0) {
        fprintf(stderr, "gpupool-fakecuda-timeline: %s\n", why);
        return 1;
    }
    uint64_t now = fc_tl_now();
    printf("now %llu\n", (unsigned long long)now);
    for (unsigned i = 0; i < FC_TL_PROCS; i++) {
        const struct fc_tl_proc *p = &tl.f->procs[i];
        if (p->pid == 0)
            continue;
        uint64_t ahead = fc_tl_busy_within(p, now, UINT64_MAX);
        printf("proc %d busy=%llu wait=%llu kernels=%llu\n", (int)p->pid,
               (unsigned long long)(p->busy_ns - ahead), (unsigned long long)p->wait_ns,
               (unsigned long long)p->kernels);
    }
    return 0;
}
