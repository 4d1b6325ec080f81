/* core_probe.c -- a shared object built from gp_core alone (whole archive,
 * -fPIC, --no-undefined): what an LD_PRELOAD library linking the base core
 * gets. check_core_deps.sh reads its NEEDED entries. */
#include "clock.h"
#include "log.h"

int core_probe_now_positive(void);

int core_probe_now_positive(void)
{
    return clock_now_ns() > 0;
}
