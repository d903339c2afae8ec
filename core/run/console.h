/* console.h - what a person watching a run sees: a table on stdout as points complete, and a
 * progress line on stderr when both stdout and stderr are a terminal. */
#ifndef MP_CONSOLE_H
#define MP_CONSOLE_H

/* Show the progress line from now on when `on` and both stdout and stderr are terminals (the
 * binaries pass !--quiet); off until called. The clock of "elapsed" starts here. */
void mp_progress_enable(int on);
/* Rewrite the progress line on stderr before point `done` of `total` starts (never inside a timed
 * region): "[done/total] 12 s elapsed, about 40 s left: label", cut to the terminal's width;
 * the time left is the mean of the points this process measured so far times those still to
 * come (none shown before the second). Nothing unless enabled. */
void mp_progress(int done, int total, const char *label);
/* Erase the progress line (before printing a table row, and at the end). */
void mp_progress_clear(void);

/* The rank this process will have under mpirun/srun, from the launcher's environment, or -1:
 * lets option errors print once before MPI is initialised. */
int mp_launcher_rank(void);

struct mp_summary;

/* One number column of a console table: its title, the per-iteration metric it shows (a column
 * name of the schema), which statistic (median or p99) and its printf width and precision. */
struct mp_console_metric {
    const char *title, *metric;
    int p99, width, prec;
};

/* The summary of metric `name` in `sm`, whose entries follow the metric columns of
 * layer_samples.csv (mp_schema_layer_samples after its key and `iter`); NULL when there is none. */
const struct mp_summary *mp_metric_summary(const struct mp_summary *sm, const char *name);

/* Print " %*s" for each column's title (the table header). */
void mp_console_titles(const struct mp_console_metric *cols, int n);
/* Print " %*.*f" for each column: its statistic of its metric, picked by name from `sm` as
 * mp_metric_summary does (NaN when the metric is unknown). */
void mp_console_values(const struct mp_console_metric *cols, int n, const struct mp_summary *sm);

#endif
