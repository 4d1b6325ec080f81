/* quantity.c -- Kubernetes quantity strings to whole numbers (see quantity.h).
 *
 * A quantity is mantissa * base^exp. The mantissa's digits are kept as one
 * integer with a count of fractional digits, so the result is exact: the
 * scaling is done in 128-bit integers and rounded up once at the end, like
 * resource.Quantity.Value(). */
#include "quantity.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

typedef unsigned __int128 u128;

/* 10^19 < 2^64, so mantissa << 60 and mantissa * 10^19 both fit in 128 bits. */
#define DIGITS_MAX 19

struct suffix {
    const char *text;
    bool binary; /* 2^power, else 10^power */
    int power;
};

static const struct suffix suffixes[] = {
    {"Ki", true, 10}, {"Mi", true, 20}, {"Gi", true, 30}, {"Ti", true, 40},
    {"Pi", true, 50}, {"Ei", true, 60}, {"n", false, -9}, {"u", false, -6},
    {"m", false, -3}, {"", false, 0},   {"k", false, 3},  {"M", false, 6},
    {"G", false, 9},  {"T", false, 12}, {"P", false, 15}, {"E", false, 18},
};

static u128 pow10_u128(int n)
{
    u128 v = 1;
    while (n-- > 0)
        v *= 10;
    return v;
}

/* Parses "e12" / "E-3"; returns 0 with *power, -1 when malformed. */
static int parse_exponent(const char *s, int *power)
{
    int sign = 1, value = 0;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    if (!isdigit((unsigned char)*s))
        return -1;
    for (; isdigit((unsigned char)*s); s++) {
        value = value * 10 + (*s - '0');
        if (value > 1000)
            return -1;
    }
    if (*s)
        return -1;
    *power = sign * value;
    return 0;
}

static int find_suffix(const char *s, bool *binary, int *power)
{
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        if (strcmp(s, suffixes[i].text) == 0) {
            *binary = suffixes[i].binary;
            *power = suffixes[i].power;
            return 0;
        }
    }
    /* Not "E" or "Ei" (exa, exbi, matched above): a decimal exponent. */
    if (*s == 'e' || *s == 'E') {
        *binary = false;
        return parse_exponent(s + 1, power);
    }
    return -1;
}

/* ceil(num / den), both positive. */
static u128 div_ceil(u128 num, u128 den)
{
    return num / den + (num % den != 0);
}

int quantity_parse(const char *text, int64_t *out)
{
    if (!text)
        return -1;
    const char *s = text;
    if (*s == '+')
        s++;
    u128 mantissa = 0;
    int digits = 0, fraction_digits = 0;
    bool in_fraction = false, seen_digit = false;
    for (; isdigit((unsigned char)*s) || (*s == '.' && !in_fraction); s++) {
        if (*s == '.') {
            in_fraction = true;
            continue;
        }
        seen_digit = true;
        if (mantissa == 0 && *s == '0') {
            fraction_digits += in_fraction; /* leading zeros cost no digit budget */
            if (fraction_digits > 1000)
                return -1;
            continue;
        }
        if (++digits > DIGITS_MAX)
            return -1;
        mantissa = mantissa * 10 + (u128)(*s - '0');
        if (in_fraction)
            fraction_digits++;
    }
    if (!seen_digit)
        return -1;
    bool binary;
    int power;
    if (find_suffix(s, &binary, &power) != 0)
        return -1;

    const u128 limit = (u128)INT64_MAX;
    u128 value;
    if (binary) {
        /* mantissa * 2^power / 10^fraction_digits, power <= 60 */
        if (fraction_digits > 38)
            return -1;
        value = div_ceil(mantissa << power, pow10_u128(fraction_digits));
    } else {
        int exp10 = power - fraction_digits;
        if (exp10 >= 0) {
            if (mantissa != 0 && exp10 > 19)
                return -1;
            u128 scale = pow10_u128(exp10);
            if (mantissa != 0 && mantissa > limit / scale + 1)
                return -1;
            value = mantissa * scale;
        } else {
            value = -exp10 > 38 ? (mantissa != 0) : div_ceil(mantissa, pow10_u128(-exp10));
        }
    }
    if (value > limit)
        return -1;
    *out = (int64_t)value;
    return 0;
}
