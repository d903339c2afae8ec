/* model.h - MoE model presets (facts from the models' public configs), per-field overrides and
 * key=value model files. */
#ifndef MP_MODEL_H
#define MP_MODEL_H

struct mp_model {
    char name[64];
    int hidden;  /* H */
    int ffn;     /* D, the expert FFN (intermediate) dimension */
    int experts; /* E, routed experts */
    int topk;    /* K */
    int shared;  /* always-active shared experts, each of FFN dimension D */
    int layers;  /* MoE layer count */
    const char *note; /* caveats shown in --help (assumed fields), or NULL */
};

extern const struct mp_model mp_model_presets[];
extern const int mp_model_npresets;

/* Resolve `spec`: a preset name, or a path to a key=value file (keys: name, hidden, ffn, experts,
 * topk, shared, layers; '#' starts a comment; a file may start from a preset with "base=NAME").
 * Unknown presets, unreadable files, unknown keys, non-numbers and missing fields print one line
 * naming --model or the file (and line) and return MP_ERR_USAGE.
 * File details: keys may come in any order and at most once each; "base" is applied first and
 * every other key overrides the base's field (the base's note is kept only when no size is set).
 * Without base, hidden, ffn, experts, topk and layers are required and shared defaults to 0.
 * `name` defaults to the file's basename without its extension. On error `out` is untouched. */
int mp_model_resolve(const char *spec, struct mp_model *out);

/* Apply overrides (-1 keeps the field) and validate the result: every size >= 1 (shared >= 0),
 * topk <= experts. Errors name the flag. Returns MP_OK or MP_ERR_USAGE. */
int mp_model_override(struct mp_model *m, int experts, int topk, int shared, int hidden, int ffn,
                      int layers);

/* One line per preset for --help. */
void mp_model_list(char *buf, unsigned long len);

#endif
