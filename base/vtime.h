/* vtime.h - the virtual time of one of the model's traced ranks, which its comm and compute
 * share: the comm's collectives and the compute's marks move and read it. */
#ifndef MP_VTIME_H
#define MP_VTIME_H

/* A rank's time is origin + clock [µs]. A barrier of the whole world (every rank's work through)
 * moves the origin up by the clock (shift), sets the clock to 0 and counts an epoch, so that the
 * times within an iteration are differences of small numbers and a mark before the barrier is
 * `shift` before the origin after it, exactly. */
struct mp_vtime {
    double clock, origin, shift;
    unsigned long epoch;
};

/* b − a for two readings of one rank's time [µs]. */
static inline double mp_vtime_between(const struct mp_vtime *a, const struct mp_vtime *b)
{
    if (a->epoch == b->epoch)
        return b->clock - a->clock;
    if (b->epoch == a->epoch + 1)
        return (b->shift - a->clock) + b->clock;
    return (b->origin - a->origin) + (b->clock - a->clock);
}

#endif
