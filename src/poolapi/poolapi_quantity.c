/* poolapi_quantity.c -- Kubernetes quantities (see poolapi_quantity.h).
 *
 * A quantity is mantissa * 2^shift * 10^exp10. The mantissa's digits are
 * kept as one integer with a count of fractional digits, so the result is
 * exact: the scaling is done in 128-bit integers and rounded up once. */
#include "poolapi_quantity.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned __int128 u128;

/* ---- quantities ---------------------------------------------------------- */

static bool mul_u128(u128 a, u128 b, u128 *out)
{
    if (a != 0 && b > (~(u128)0) / a)
        return false;
    *out = a * b;
    return true;
}

static u128 pow10_u128(unsigned n)
{
    u128 v = 1;
    while (n--)
        v *= 10;
    return v;
}

/* The suffix of a quantity: a power of two (binary_shift) and of ten (exp10). */
static int quantity_suffix(const char *s, unsigned *binary_shift, int *exp10)
{
    static const struct {
        const char *name;
        unsigned shift;
        int exp10;
    } suffixes[] = {
        {"", 0, 0},    {"Ki", 10, 0}, {"Mi", 20, 0}, {"Gi", 30, 0}, {"Ti", 40, 0}, {"Pi", 50, 0},
        {"Ei", 60, 0}, {"n", 0, -9},  {"u", 0, -6},  {"m", 0, -3},  {"k", 0, 3},   {"M", 0, 6},
        {"G", 0, 9},   {"T", 0, 12},  {"P", 0, 15},  {"E", 0, 18},
    };
    *binary_shift = 0;
    *exp10 = 0;
    const char *p = s + 1;
    if (s[0] && (*p == '+' || *p == '-'))
        p++;
    if ((s[0] == 'e' || s[0] == 'E') && isdigit((unsigned char)*p)) {
        /* Scientific notation: e<int>; "E" and "Ei" are suffixes, below. */
        for (const char *q = p; *q; q++)
            if (!isdigit((unsigned char)*q))
                return -1;
        errno = 0;
        long e = strtol(s + 1, NULL, 10);
        if (errno || e > 60 || e < -60)
            return -1;
        *exp10 = (int)e;
        return 0;
    }
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if (strcmp(s, suffixes[i].name) == 0) {
            *binary_shift = suffixes[i].shift;
            *exp10 = suffixes[i].exp10;
            return 0;
        }
    }
    return -1;
}

int poolapi_quantity_parse(const char *text, uint64_t scale, uint64_t *out, char *err,
                           size_t errlen)
{
    const char *p = text;
    if (!p || !*p) {
        snprintf(err, errlen, "empty quantity");
        return -1;
    }
    if (*p == '-') {
        snprintf(err, errlen, "quantity \"%.40s\" is negative", text);
        return -1;
    }
    if (*p == '+')
        p++;
    u128 mantissa = 0;
    unsigned digits = 0, fraction = 0;
    bool dot = false;
    for (; isdigit((unsigned char)*p) || (*p == '.' && !dot); p++) {
        if (*p == '.') {
            dot = true;
            continue;
        }
        if (mantissa == 0 && *p == '0') {
            if (dot)
                fraction++;
            continue; /* leading zeros carry no digits */
        }
        if (++digits > 30) {
            snprintf(err, errlen, "quantity \"%.40s\" has too many digits", text);
            return -1;
        }
        mantissa = mantissa * 10 + (u128)(*p - '0');
        if (dot)
            fraction++;
    }
    bool any_digit = false;
    for (const char *q = text; q < p; q++)
        any_digit |= isdigit((unsigned char)*q) != 0;
    unsigned shift;
    int exp10;
    if (!any_digit || quantity_suffix(p, &shift, &exp10) < 0) {
        snprintf(err, errlen, "invalid quantity \"%.40s\"", text);
        return -1;
    }
    int net10 = exp10 - (int)fraction;
    u128 num = mantissa, den = 1;
    bool ok = mul_u128(num, scale, &num) && mul_u128(num, (u128)1 << shift, &num);
    if (ok && net10 > 0)
        ok = net10 <= 38 && mul_u128(num, pow10_u128((unsigned)net10), &num);
    if (ok && net10 < 0) {
        if (-net10 > 38) {
            *out = num ? 1 : 0; /* a positive speck rounds up to one unit */
            return 0;
        }
        den = pow10_u128((unsigned)-net10);
    }
    u128 value = ok ? num / den + (num % den != 0) : 0;
    if (!ok || value > UINT64_MAX) {
        snprintf(err, errlen, "quantity \"%.40s\" is too large", text);
        return -1;
    }
    *out = (uint64_t)value;
    return 0;
}

/* A quantity value: Kubernetes writes strings; plain integers are accepted. */
int poolapi_quantity_json(const json_t *v, const char *what, uint64_t scale, uint64_t *out,
                          char *err, size_t errlen)
{
    char why[128];
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 || (uint64_t)i > UINT64_MAX / scale) {
            snprintf(err, errlen, "%s: %lld is out of range", what, (long long)i);
            return -1;
        }
        *out = (uint64_t)i * scale;
        return 0;
    }
    if (!json_is_string(v)) {
        snprintf(err, errlen, "%s must be a quantity string", what);
        return -1;
    }
    if (poolapi_quantity_parse(json_string_value(v), scale, out, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "%s: %s", what, why);
        return -1;
    }
    return 0;
}

int poolapi_quantity_whole(const json_t *v, const char *what, uint64_t *out, char *err,
                           size_t errlen)
{
    uint64_t milli;
    if (json_is_integer(v))
        return poolapi_quantity_json(v, what, 1, out, err, errlen);
    /* Milli-units show a fraction that Value() would round away. */
    if (poolapi_quantity_json(v, what, 1000, &milli, err, errlen) < 0)
        return -1;
    if (milli % 1000 != 0) {
        snprintf(err, errlen, "%s: \"%.40s\" is not a whole number", what, json_string_value(v));
        return -1;
    }
    *out = milli / 1000;
    return 0;
}
