/* fakecuda_size.h -- the one size parser of the CUDA test doubles: the fake
 * driver's FAKECUDA_DEVICES totals and the probe's SIZE arguments.
 * Test-only; the isolation library has its own (src/cuda/cuda_config.c),
 * which the tests check against these literals independently. */
#ifndef GP_FAKECUDA_SIZE_H
#define GP_FAKECUDA_SIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parses the n bytes at s: decimal digits, then (when suffix) an optional
 * k/m/g/t (1024-based, either case) as the last byte. 0 on success, -1 on
 * an empty string, any other byte, or overflow. */
static inline int fakecuda_parse_size(const char *s, size_t n, bool suffix, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == 0)
        return -1;
    unsigned shift = 0;
    if (i < n) {
        static const char units[] = "kmgt";
        const char *u = NULL;
        for (size_t k = 0; k < 4; k++)
            if ((s[i] | 0x20) == units[k])
                u = &units[k];
        if (!suffix || u == NULL || i + 1 != n)
            return -1;
        shift = 10 * (unsigned)(u - units + 1);
    }
    if (v > (UINT64_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

#endif
