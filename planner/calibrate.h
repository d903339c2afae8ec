/* calibrate.h - fitting a cluster profile's behaviour parameters (efficiencies, latencies, launch
 * overhead, congestion) to measured run directories by least squares, and predicting measured
 * points with a profile to validate it. */
#ifndef MP_CALIBRATE_H
#define MP_CALIBRATE_H

#include "cluster.h"
#include "model.h"
#include "placement.h"
#include "routing.h"
#include "vlayer.h"

/* The columns a fit compares, across the three tools' CSVs. */
enum mp_calib_col {
    CAL_LAYER_FFN, CAL_LAYER_DISPATCH, CAL_LAYER_COMBINE, CAL_LAYER_TP, CAL_LAYER_LAYER,
    CAL_A2A_TIME, CAL_FFN_FFN, CAL_NCOLS
};
extern const char *const mp_calib_col_names[CAL_NCOLS];

/* One measured point and what the model needs to predict it. */
struct mp_calib_point {
    int tool;                  /* 0 layer, 1 a2a, 2 ffn */
    char label[160];           /* "dir: tp1ep2 uniform contiguous batch 16" */
    double meas[CAL_NCOLS];    /* measured medians; NAN where the column does not apply */
    /* layer */
    struct mp_model model;
    int tp, ep, iters;
    struct mp_routing routing;
    struct mp_placement placement;
    struct mp_vtraffic *traffic;
    int ndraws;
    /* a2a: uniform pattern */
    double bytes_per_peer;
    /* ffn, and the layer's FFN: the run's --gemm (enum mp_gemm) */
    double flops, weight_bytes;
    int active, gemm;
};

struct mp_calib_set {
    struct mp_cluster base; /* hardware facts (and starting behaviour) */
    int n, cap;
    int gemm; /* while loading: the --gemm of the run being loaded */
    struct mp_calib_point *pts;
};

/* Load every point of the run directories' layer.csv, a2a.csv (uniform pattern) and ffn.csv.
 * `base` gives the starting profile; its gpus_per_node and elem_bytes are replaced by the runs'
 * own (run.json: ranks per node, and the element size of the compute backend or the model's
 * profile). Errors name the directory or file; MP_ERR_USAGE. */
int mp_calib_load(const char *const *dirs, int ndirs, const struct mp_cluster *base,
                  struct mp_calib_set *set);
void mp_calib_free(struct mp_calib_set *set);

/* Predict every column of point `i` under profile `cl` into pred[CAL_NCOLS] (a layer column: the
 * median over the point's draws; NAN where the column does not apply), from one timing of each
 * draw. */
void mp_calib_predict_all(const struct mp_calib_set *set, int i, const struct mp_cluster *cl,
                          double *pred);
/* Predict column `col` of point `i` under profile `cl` (median over the point's draws). */
double mp_calib_predict(const struct mp_calib_set *set, int i, const struct mp_cluster *cl, int col);

/* Errors of a profile on a set, per column: count, median and largest |pred − meas| / meas. */
struct mp_calib_errors {
    int n[CAL_NCOLS];
    double median[CAL_NCOLS], worst[CAL_NCOLS];
};
void mp_calib_errors(const struct mp_calib_set *set, const struct mp_cluster *cl,
                     struct mp_calib_errors *err);

/* Fit the behaviour parameters (mp_cluster_params with fit = 1) to the set: minimise
 * Σ (ln pred − ln meas)² over every point and column (relative errors, so µs-scale latencies and
 * ms-scale FFNs weigh alike) with Nelder–Mead on the logarithms of the parameters, restarted until
 * it stops improving, plus a weak prior 10⁻⁵·Σ (ln θ − ln θ₀)² toward the starting profile that
 * keeps parameters the runs barely constrain near it. Parameters the data cannot see (no change of the objective when varied) keep
 * the base value and are reported in `frozen` ([mp_cluster_nparams], 1 = not fitted). Efficiencies
 * above 1 are folded into the peak. Returns MP_OK or MP_ERR_USAGE (no points). */
int mp_calib_fit(const struct mp_calib_set *set, struct mp_cluster *out, int *frozen,
                 double *objective);

#endif
