/* fakecuda_phys_tool.c -- gpupool-fakecuda-phys: prints the physical-use file
 * that FAKECUDA_PHYS names (fakecuda_phys.h), one line per device:
 *
 *   dev=<i> uuid=<uuid> current=<bytes> peak=<bytes>
 *
 * Usage: gpupool-fakecuda-phys [--reset-peak] PATH. Dead processes' bytes are
 * dropped first; --reset-peak sets each peak to the current (after printing
 * nothing else). Exit 0, 1 when the file cannot be read, 2 on a usage error.
 * Opening creates the file when missing (the same code as the driver's). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fakecuda_phys.h"

int main(int argc, char **argv)
{
    int reset = 0, i = 1;
    if (i < argc && strcmp(argv[i], "--reset-peak") == 0) {
        reset = 1;
        i++;
    }
    if (i + 1 != argc || argv[i][0] == '-') {
        fputs("usage: gpupool-fakecuda-phys [--reset-peak] PATH\n", stderr);
        return 2;
    }
    struct fc_phys p;
    char why[512];
    if (fc_phys_open(&p, argv[i], why, sizeof(why)) != 0) {
        fprintf(stderr, "gpupool-fakecuda-phys: %s\n", why);
        return 1;
    }
    struct fc_phys_dev devs[FC_PHYS_DEVICES];
    uint32_t n = 0;
    if (fc_phys_snapshot(&p, reset, devs, &n) != 0) {
        fprintf(stderr, "gpupool-fakecuda-phys: cannot lock %s\n", argv[i]);
        fc_phys_close(&p);
        return 1;
    }
    fc_phys_close(&p);
    for (uint32_t d = 0; d < n; d++)
        printf("dev=%" PRIu32 " uuid=%s current=%" PRIu64 " peak=%" PRIu64 "\n", d, devs[d].uuid,
               devs[d].current, devs[d].peak);
    return fflush(stdout) == 0 ? 0 : 1;
}
