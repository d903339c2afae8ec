/* test_dispatch.c - the dispatch-mode table: every entry complete and named as MP_DISPATCH_MODES
 * says, the --dispatch words and their parsing generated from it, and each point given to the
 * mode it carries (or that mode's pipelined form). */
#include <string.h>

#include "check.h"
#include "compute.h"
#include "dedup.h"
#include "dispatch.h"
#include "error.h"
#include "vlayer.h"

/* Whether some mode runs `m` as its pipelined or deduplicated form (how a mode with no
 * --dispatch word is reached). */
static int form_of_another(const struct mp_dispatch_mode *m)
{
    for (int i = 0; mp_dispatch_modes[i]; i++)
        if (mp_dispatch_modes[i]->pipelined == m || mp_dispatch_modes[i]->deduplicated == m)
            return 1;
    return 0;
}

static int in_choices(const char *word)
{
    for (int i = 0; mp_dispatch_choices[i]; i++)
        if (strcmp(mp_dispatch_choices[i], word) == 0)
            return 1;
    return 0;
}

int main(void)
{
    int n = 0;
    for (const struct mp_dispatch_mode *const *m = mp_dispatch_modes; *m; m++, n++) {
        CHECK((*m)->name && (*m)->iterate && (*m)->model_traffic);
        /* a plan hook, or a host plan built in iterate (the deduplicated modes) */
        CHECK((*m)->plan || (*m)->dedup_modes);
        CHECK((*m)->backend_bit && !((*m)->backend_bit & ~MP_DISPATCH_ALL));
        for (const struct mp_dispatch_mode *const *o = mp_dispatch_modes; o != m; o++)
            CHECK(strcmp((*o)->name, (*m)->name) != 0);
        /* a mode is named by --dispatch, or reached as another's pipelined or deduplicated form */
        CHECK(in_choices((*m)->name) || form_of_another(*m));
        /* a deduplicated form carries out some --dedup besides pair, and is a form itself */
        CHECK(!(*m)->deduplicated || ((*m)->deduplicated->dedup_modes &&
                                      !(*m)->deduplicated->deduplicated));
        /* NAME:ARG is offered exactly when the mode reads an argument */
        char with_arg[64];
        snprintf(with_arg, sizeof with_arg, "%s:", (*m)->name);
        CHECK(in_choices(with_arg) == ((*m)->parse_arg != NULL));
        CHECK(!(*m)->pipelined || (*m)->pipelined->pipelined == NULL);
    }
    /* each entry of MP_DISPATCH_MODES is the mode of its name, and the table holds them all */
#define NAMED(n, words, help) CHECK_STR(mp_dispatch_##n.name, #n);
    MP_DISPATCH_MODES(NAMED)
#undef NAMED
#define ONE(n, words, help) +1
    CHECK_INT(n, 0 MP_DISPATCH_MODES(ONE));
#undef ONE
    CHECK(n >= 3);

    /* the words --dispatch accepted before the table generated them, dynamic (the default) first */
    CHECK_STR(mp_dispatch_choices[0], "dynamic");
    CHECK(in_choices("padded") && in_choices("padded:") && !in_choices("dynamic:"));
    CHECK(!in_choices("pipelined") && !in_choices("pipelined:"));
    CHECK(strstr(MP_DISPATCH_HELP, "padded:F (capacity factor F") != NULL);
    CHECK(strstr(MP_DISPATCH_HELP, "dynamic (exact counts") != NULL);

    const struct mp_dispatch_mode *mode;
    double arg = -1;
    CHECK_INT(mp_dispatch_parse("dynamic", &mode, &arg), MP_OK);
    CHECK(mode == &mp_dispatch_dynamic && arg == 0);
    CHECK_INT(mp_dispatch_parse("padded", &mode, &arg), MP_OK);
    CHECK(mode == &mp_dispatch_padded && arg == 0);
    CHECK_INT(mp_dispatch_parse("padded:1.5", &mode, &arg), MP_OK);
    CHECK(mode == &mp_dispatch_padded);
    CHECK_NEAR(arg, 1.5, 0);
    CHECK_INT(mp_dispatch_parse("padded:1024", &mode, &arg), MP_OK);
    const char *const bad[] = {"padded:0", "padded:", "padded:x", "padded:1.5x", "padded:1025",
                               "padded:-1", "dynamic:2", "pipelined", "fixed", "", "paddedx",
                               NULL};
    for (int i = 0; bad[i]; i++) {
        CHECK_INT(mp_dispatch_parse(bad[i], &mode, &arg), MP_ERR_USAGE);
        CHECK(mode == NULL);
    }

    /* the point carries its mode; --overlap above 1 runs that mode's pipelined form */
    struct mp_point pt = {.overlap = 1};
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dynamic); /* NULL: dynamic */
    pt.overlap = 0; /* ≤ 1: not pipelined */
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dynamic);
    pt.overlap = 4;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_pipelined);
    CHECK_INT(mp_dispatch_check_overlap(&pt), MP_OK);
    pt.dispatch = &mp_dispatch_dynamic;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_pipelined);
    CHECK(mp_dispatch_pipelined.reference == &mp_dispatch_dynamic);
    pt.dispatch = &mp_dispatch_padded; /* padded has no pipelined form: refused */
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_padded);
    CHECK_INT(mp_dispatch_check_overlap(&pt), MP_ERR_USAGE);
    pt.overlap = 1;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_padded);
    CHECK_INT(mp_dispatch_check_overlap(&pt), MP_OK);
    /* --dedup rank and node run the dynamic dispatch's deduplicated form, unpipelined only;
     * padded or pipelined points with either are refused */
    pt.dispatch = NULL;
    pt.dedup = MP_DEDUP_RANK;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dedup);
    CHECK_INT(mp_dispatch_check_dedup(&pt), MP_OK);
    CHECK(mp_dispatch_dedup.model_traffic == mp_vtraffic_dynamic);
    pt.dedup = MP_DEDUP_NODE;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dedup);
    CHECK_INT(mp_dispatch_check_dedup(&pt), MP_OK);
    pt.dedup = MP_DEDUP_RANK;
    pt.overlap = 2; /* pipelined over chunks of tokens */
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dedup_pipelined);
    CHECK_INT(mp_dispatch_check_dedup(&pt), MP_OK);
    CHECK(mp_dispatch_dedup_pipelined.reference == &mp_dispatch_dedup);
    CHECK(mp_dispatch_dedup_pipelined.model_traffic == mp_vtraffic_dedup_pipelined);
    pt.overlap = 1;
    pt.dispatch = &mp_dispatch_padded;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dedup_padded); /* slots, one row per rank */
    CHECK_INT(mp_dispatch_check_dedup(&pt), MP_OK);
    CHECK(mp_dispatch_dedup_padded.model_traffic == mp_vtraffic_dedup_padded);
    pt.dedup = MP_DEDUP_NODE; /* node's relays in slots too */
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_dedup_padded);
    CHECK_INT(mp_dispatch_check_dedup(&pt), MP_OK);
    pt.dedup = MP_DEDUP_PAIR;
    CHECK(mp_dispatch_for(&pt) == &mp_dispatch_padded);
    CHECK_INT(mp_dispatch_check_dedup(&pt), MP_OK);
    /* only the padded dispatch waits on no host sync, so only it can be captured */
    CHECK(mp_dispatch_padded.capture && !mp_dispatch_dynamic.capture &&
          !mp_dispatch_pipelined.capture);
    /* the model builds each mode's traffic with the builder its entry names */
    CHECK(mp_dispatch_padded.model_traffic == mp_vtraffic_padded);
    CHECK(mp_dispatch_dynamic.model_traffic == mp_vtraffic_dynamic);
    CHECK_DONE();
}
