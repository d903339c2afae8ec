/* test_calibrate.c - the hardware facts calibration reads from a run directory's run.json: the
 * element bytes the run recorded, and for a run written before they were recorded, the element
 * size of the backend it names (4 for cpu, 2 for a GPU backend, built here or not). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate.h"
#include "check.h"
#include "cluster.h"
#include "error.h"

/* A run directory holding `run_json` and a one-row ffn.csv; returns the element bytes
 * mp_calib_load settled on (0 when it refused the directory). */
static double elem_bytes_of(const char *run_json)
{
    char dir[] = "/tmp/moeperf-calib.XXXXXX", path[4200];
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof path, "%s/run.json", dir);
    FILE *f = fopen(path, "w");
    fputs(run_json, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/ffn.csv", dir);
    f = fopen(path, "w");
    fputs("flops,weight_bytes,active_experts,ffn_us,batch\n1000000000,1000000,4,100,16\n", f);
    fclose(f);
    struct mp_cluster base;
    memset(&base, 0, sizeof base);
    base.elem_bytes = 99; /* replaced by the run's own */
    struct mp_calib_set set;
    const char *dirs[] = {dir};
    double elem = 0;
    if (mp_calib_load(dirs, 1, &base, &set) == MP_OK) {
        elem = set.base.elem_bytes;
        mp_calib_free(&set);
    }
    unlink(path);
    snprintf(path, sizeof path, "%s/run.json", dir);
    unlink(path);
    rmdir(dir);
    return elem;
}

int main(void)
{
    mp_log_init("test_calibrate", -1);
    /* recorded: the recorded size wins over the backend's name */
    CHECK_NEAR(elem_bytes_of("{\"world\": 2, \"nodes\": 1, \"libraries\": {\"compute\": \"cuda\", "
                             "\"compute_elem_bytes\": 4}}"),
               4, 0);
    CHECK_NEAR(elem_bytes_of("{\"world\": 2, \"nodes\": 1, \"libraries\": {\"compute\": \"cpu\", "
                             "\"compute_elem_bytes\": 2}}"),
               2, 0);
    /* older runs: from the backend's name */
    CHECK_NEAR(elem_bytes_of("{\"world\": 2, \"nodes\": 1, \"libraries\": {\"compute\": \"cpu\"}}"),
               4, 0);
    CHECK_NEAR(elem_bytes_of("{\"world\": 2, \"nodes\": 1, \"libraries\": {\"compute\": \"cuda\"}}"),
               2, 0);
    /* a recorded size out of range is refused */
    CHECK_NEAR(elem_bytes_of("{\"world\": 2, \"nodes\": 1, \"libraries\": {\"compute\": \"cpu\", "
                             "\"compute_elem_bytes\": 0}}"),
               0, 0);
    return check_failures;
}
