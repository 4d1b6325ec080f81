/* errmsg.c -- filling the caller-supplied error buffer (see errmsg.h). */
#include "errmsg.h"

#include <stdio.h>

int gp_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (errlen == 0)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

int gp_verrf_at(char *err, size_t errlen, const char *path, unsigned long line, const char *fmt,
                va_list ap)
{
    if (errlen == 0)
        return -1;
    int used = snprintf(err, errlen, "%s:%lu: ", path, line);
    if (used < 0 || (size_t)used >= errlen)
        return -1;
    vsnprintf(err + used, errlen - (size_t)used, fmt, ap);
    return -1;
}
