// tests/check.h — a tiny assertion helper shared by the C tests.
// Each CHECK prints "PASS name" or "FAIL name: detail"; tests/run_all.sh counts them.
#ifndef FEMTOTRON_CHECK_H
#define FEMTOTRON_CHECK_H

#include <math.h>
#include <stdio.h>

static int check_failures = 0;
static int check_passes = 0;

#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (cond) {                                       \
            check_passes++;                               \
            printf("PASS ");                              \
            printf(__VA_ARGS__);                          \
            printf("\n");                                 \
        } else {                                          \
            check_failures++;                             \
            printf("FAIL ");                              \
            printf(__VA_ARGS__);                          \
            printf("  [%s:%d: %s]\n", __FILE__, __LINE__, #cond); \
        }                                                 \
        fflush(stdout);                                   \
    } while (0)

// Relative difference, safe when both are near zero.
static inline double rel_diff(double a, double b) {
    double d = fabs(a - b), s = fmax(fabs(a), fabs(b));
    return s < 1e-30 ? d : d / s;
}

static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_passes, check_failures);
    return check_failures ? 1 : 0;
}

#endif
