/* test_dispatch.c - the dispatch-mode table: every entry complete and named once, each point
 * given to the mode that runs it, and the model building the same mode's traffic. */
#include <string.h>

#include "check.h"
#include "dispatch.h"
#include "vlayer.h"

int main(void)
{
    int n = 0;
    for (const struct mp_dispatch_mode *const *m = mp_dispatch_modes; *m; m++, n++) {
        CHECK((*m)->name && (*m)->accepts && (*m)->plan && (*m)->iterate && (*m)->model_traffic);
        for (const struct mp_dispatch_mode *const *o = mp_dispatch_modes; o != m; o++)
            CHECK(strcmp((*o)->name, (*m)->name) != 0);
    }
    CHECK_INT(n, 3);

    struct mp_point pt = {.overlap = 1};
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dynamic);
    /* the model builds each point's traffic with its mode's builder */
    for (int padded = 0; padded <= 1; padded++)
        for (int overlap = 0; overlap <= 4; overlap += 2) {
            struct mp_point q = {.padded = padded, .overlap = overlap};
            CHECK(mp_dispatch_for(&q)->model_traffic == mp_vtraffic_mode(&q));
        }
    pt.overlap = 0; /* ≤ 1: not pipelined */
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dynamic);
    pt.overlap = 4;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_pipelined);
    CHECK(mp_dispatch_pipelined.reference == &mp_dispatch_dynamic);
    pt.padded = 1; /* padded with --overlap goes to padded, whose validate refuses it */
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_padded);
    CHECK(mp_dispatch_padded.validate != NULL);
    pt.overlap = 1;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_padded);
    /* only the padded dispatch waits on no host sync, so only it can be captured */
    CHECK(mp_dispatch_padded.capture && !mp_dispatch_dynamic.capture &&
          !mp_dispatch_pipelined.capture);
    CHECK_DONE();
}
