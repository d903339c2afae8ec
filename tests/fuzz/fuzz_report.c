/* fuzz_report.c - the run-directory reader of moeperf-report: run.json, layer.csv, a2a.csv and
 * plan.json from the fuzzer's bytes (split at NULs), then the curves and findings built from them
 * and the plan's answer rendered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "report.h"
#include "report_doc.h"
#include "report_plan.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet("fuzz_report");
    if (size > 65536)
        return 0;
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/moeperf-fuzz-report-%d", (int)getpid());
    mkdir(dir, 0755);
    static const char *const names[] = {"run.json", "layer.csv", "a2a.csv", "plan.json"};
    const uint8_t *p = data, *end = data + size;
    for (int i = 0; i < 4; i++) {
        const uint8_t *nul = memchr(p, 0, (size_t)(end - p));
        size_t n = nul ? (size_t)(nul - p) : (size_t)(end - p);
        char path[300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
        if (n > 0) /* an empty part: no such file */
            fuzz_put(dir, names[i], p, n);
        p = nul ? nul + 1 : end;
    }
    struct rp_run run;
    if (rp_run_load(dir, &run) == MP_OK) {
        struct rp_series *s = NULL;
        int n = 0;
        if (rp_layer_series(&run, 1, &s, &n) == MP_OK) {
            for (int i = 0; i < n; i++) {
                double *b = malloc(sizeof(double) * (size_t)(s[i].n + 1));
                double *r = malloc(sizeof(double) * (size_t)(s[i].n + 1));
                for (int j = 0; b && r && j < s[i].n; j++) {
                    b[j] = s[i].pt[j].batch;
                    r[j] = s[i].pt[j].ratio;
                }
                if (b && r) {
                    rp_batch_cap(b, r, s[i].n);
                    rp_knee(b, r, s[i].n, 1.1);
                    rp_bubble_summary(b, r, s[i].n);
                }
                free(b);
                free(r);
            }
            rp_series_free(s, n);
        }
        struct doc d = {fopen("/dev/null", "w"), NULL, 0};
        if (d.h) {
            write_answer(&d, &run, 1);
            fclose(d.h);
        }
        rp_run_free(&run);
    }
    return 0;
}
