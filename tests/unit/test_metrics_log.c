// tests/unit/test_metrics_log.c — the resume cut of logging.metrics
// (train/metrics_log.h): records of later steps dropped, events kept by their step,
// a partial last line dropped, the kept lines byte for byte.
#include <string.h>

#include "check.h"
#include "train/metrics_log.h"

static void test_keep_until(void) {
    const char *text =
        "{\"step\": 1, \"loss\": 5.5, \"time\": 1.000}\n"
        "{\"step\": 2, \"loss\": 5.4, \"time\": 2.000}\n"
        "{\"event\": \"checkpoint\", \"step\": 2, \"path\": \"ck/step_0000002\", \"time\": 2.5}\n"
        "{\"step\": 3, \"loss\": 5.3, \"time\": 3.000}\n"
        "{\"event\": \"val\", \"step\": 3, \"val_loss\": 5.2, \"time\": 3.1}\n"
        "{\"step\": 12, \"loss\": 5.2, \"time\": 4.000}\n"
        "{\"step\": 13, \"lo";  // the killed run's last, partial write
    char out[512];
    size_t n = metrics_keep_until(text, strlen(text), 2, out);
    out[n] = '\0';
    const char *want =
        "{\"step\": 1, \"loss\": 5.5, \"time\": 1.000}\n"
        "{\"step\": 2, \"loss\": 5.4, \"time\": 2.000}\n"
        "{\"event\": \"checkpoint\", \"step\": 2, \"path\": \"ck/step_0000002\", \"time\": 2.5}\n";
    CHECK(strcmp(out, want) == 0, "cut to step 2: steps 1, 2 and the step-2 checkpoint event, unchanged (got %s)", out);
    n = metrics_keep_until(text, strlen(text), 3, out);
    out[n] = '\0';
    CHECK(strstr(out, "\"val_loss\": 5.2") && !strstr(out, "\"step\": 12"),
          "cut to step 3: the step-3 val event kept, step 12 dropped (not read as 1 or 2)");
    n = metrics_keep_until(text, strlen(text), 100, out);
    CHECK(n == strlen(text) - strlen("{\"step\": 13, \"lo"), "cut past the end: everything but the partial last line");
    CHECK(metrics_keep_until("", 0, 5, out) == 0, "an empty file stays empty");
}

int main(void) {
    test_keep_until();
    return check_summary();
}
