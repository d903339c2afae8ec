/* dispatch.c - the table of the layer's dispatch modes, the --dispatch words it accepts, and the
 * choice of a point's mode. */
#include "dispatch.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "dedup.h"
#include "error.h"
#include "registry.h"
#include "point.h"

#define MODE_OF(name, words, help) &mp_dispatch_##name,
const struct mp_dispatch_mode *const mp_dispatch_modes[] = {MP_DISPATCH_MODES(MODE_OF) NULL};
#undef MODE_OF

#define MP_DISPATCH_WORD(name) #name,
#define MP_DISPATCH_WORD_ARG(name) #name, #name ":",
#define MP_DISPATCH_NO_WORD(name)
#define WORDS_OF(name, words, help) words(name)
const char *const mp_dispatch_choices[] = {MP_DISPATCH_MODES(WORDS_OF) NULL};
#undef WORDS_OF
#undef MP_DISPATCH_WORD
#undef MP_DISPATCH_WORD_ARG
#undef MP_DISPATCH_NO_WORD

static const struct mp_dispatch_mode *mode_named(const char *name, size_t len)
{
    for (int i = 0; mp_dispatch_modes[i]; i++)
        if (strlen(mp_dispatch_modes[i]->name) == len &&
            strncmp(mp_dispatch_modes[i]->name, name, len) == 0)
            return mp_dispatch_modes[i];
    return NULL;
}

/* Whether `choice` (an entry of mp_dispatch_choices) admits `word`. */
static int admits(const char *choice, const char *word)
{
    size_t n = strlen(choice);
    return n && choice[n - 1] == ':' ? strncmp(choice, word, n) == 0 : strcmp(choice, word) == 0;
}

int mp_dispatch_parse(const char *word, const struct mp_dispatch_mode **mode, double *arg)
{
    *mode = NULL;
    *arg = 0;
    for (int i = 0; mp_dispatch_choices[i]; i++) {
        const char *choice = mp_dispatch_choices[i];
        if (!admits(choice, word))
            continue;
        size_t n = strlen(choice);
        int with_arg = choice[n - 1] == ':';
        const struct mp_dispatch_mode *m = mode_named(choice, with_arg ? n - 1 : n);
        if (!m || (with_arg && !m->parse_arg))
            break; /* a table fault: test_dispatch checks the choices against the modes */
        if (with_arg) {
            int rc = m->parse_arg(word, word + n, arg);
            if (rc != MP_OK)
                return rc;
        }
        *mode = m;
        return MP_OK;
    }
    char accepted[256] = "";
    for (int i = 0; mp_dispatch_choices[i]; i++) {
        char shown[64];
        size_t n = strlen(mp_dispatch_choices[i]);
        snprintf(shown, sizeof shown, "%s%s", mp_dispatch_choices[i],
                 n && mp_dispatch_choices[i][n - 1] == ':' ? "ARG" : "");
        mp_registry_append(accepted, sizeof accepted, shown);
    }
    mp_usage("--dispatch: '%s' is not one of %s", word, accepted);
    return MP_ERR_USAGE;
}

const struct mp_dispatch_mode *mp_dispatch_for(const struct mp_point *pt)
{
    const struct mp_dispatch_mode *m = pt->dispatch ? pt->dispatch : &mp_dispatch_dynamic;
    if (pt->overlap > 1 && m->pipelined)
        m = m->pipelined;
    return pt->dedup != MP_DEDUP_PAIR && m->deduplicated ? m->deduplicated : m;
}

int mp_dispatch_check_dedup(const struct mp_point *pt)
{
    const struct mp_dispatch_mode *m = mp_dispatch_for(pt);
    if (pt->dedup == MP_DEDUP_PAIR || (m->dedup_modes & 1u << pt->dedup))
        return MP_OK;
    if (m->dedup_modes) { /* the deduplicated form of the mode given runs other dedup modes */
        char runs[64] = "pair";
        for (int d = 1; mp_dedup_choices[d]; d++)
            if (m->dedup_modes & 1u << d)
                mp_registry_append(runs, sizeof runs, mp_dedup_choices[d]);
        mp_usage("--dedup %s with --dispatch %s: that dispatch runs --dedup %s only",
                 mp_dedup_choices[pt->dedup], pt->dispatch ? pt->dispatch->name : "dynamic", runs);
        return MP_ERR_USAGE;
    }
    if (pt->overlap > 1)
        mp_usage("--dedup %s with --overlap %d: deduplication runs unpipelined only; use "
                 "--overlap 1 with it, or --dedup pair", mp_dedup_choices[pt->dedup], pt->overlap);
    else
        mp_usage("--dedup %s with --dispatch %s: deduplication runs with the dynamic dispatch "
                 "only; use --dispatch dynamic with it, or --dedup pair",
                 mp_dedup_choices[pt->dedup], m->name);
    return MP_ERR_USAGE;
}

int mp_dispatch_check_overlap(const struct mp_point *pt)
{
    const struct mp_dispatch_mode *m = pt->dispatch ? pt->dispatch : &mp_dispatch_dynamic;
    if (pt->overlap <= 1 || m->pipelined)
        return MP_OK;
    char pipelining[128] = "";
    for (int i = 0; mp_dispatch_modes[i]; i++)
        if (mp_dispatch_modes[i]->pipelined)
            mp_registry_append(pipelining, sizeof pipelining, mp_dispatch_modes[i]->name);
    mp_usage("--overlap %d with --dispatch %s: the %s dispatch has no pipelined form; use "
             "--overlap 1 with it, or --dispatch %s", pt->overlap, m->name, m->name, pipelining);
    return MP_ERR_USAGE;
}
