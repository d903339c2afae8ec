/* console.h - what a person watching a run sees: a table on stdout as points complete, and a
 * progress line on stderr when stderr is a terminal. */
#ifndef MP_CONSOLE_H
#define MP_CONSOLE_H

/* Rewrite the progress line "[done/total] label" on stderr; nothing unless stderr is a TTY. */
void mp_progress(int done, int total, const char *label);
/* Erase the progress line (before printing a table row, and at the end). */
void mp_progress_clear(void);

/* The rank this process will have under mpirun/srun, from the launcher's environment, or -1:
 * lets option errors print once before MPI is initialised. */
int mp_launcher_rank(void);

#endif
