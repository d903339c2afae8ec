/* topk.h - top-k selection and softmax weights shared by the cpu and cuda gates (plain C, usable in
 * host and device code). */
#ifndef MP_TOPK_H
#define MP_TOPK_H

#include <math.h>
#include <stdint.h>

#include "hostdevice.h"

/* Insert expert e into the sorted list idx[0..*m) of at most k (mp_topk_select's step). */
static inline MP_HD void mp_topk_insert(const float *v, int e, int k, int32_t *idx, int *m)
{
    float x = v[e];
    if (*m == k && !(x > v[idx[k - 1]]))
        return;
    int pos = *m < k ? (*m)++ : k - 1;
    while (pos > 0 && x > v[idx[pos - 1]]) {
        idx[pos] = idx[pos - 1];
        pos--;
    }
    idx[pos] = e;
}

/* Indices of the k largest of v[0..n) in descending order of value, ties broken by lower index
 * (insertion into a sorted list of k: O(n·k), best for the k ≤ 16 of MoE gates). */
static inline MP_HD void mp_topk_select(const float *v, int n, int k, int32_t *idx)
{
    int m = 0;
    for (int e = 0; e < n; e++)
        mp_topk_insert(v, e, k, idx, &m);
}

/* Score of the group of logits l[e0 .. e0+size) for group-limited routing: the sum of its two
 * largest softmax numerators exp(l − lmax) (one expert's alone when size is 1). DeepSeek-V3 scores
 * a group by the sum of its two highest expert affinities (DeepSeek-V3 Technical Report,
 * arXiv:2412.19437, node-limited routing); the softmax shares one denominator across groups, so
 * numerators order groups as the probabilities do. */
static inline MP_HD float mp_group_score(const float *l, int e0, int size, float lmax)
{
    float a = -INFINITY, b = -INFINITY; /* the two largest logits, a >= b */
    for (int e = e0; e < e0 + size; e++) {
        if (l[e] > a) {
            b = a;
            a = l[e];
        } else if (l[e] > b) {
            b = l[e];
        }
    }
    return expf(a - lmax) + (size > 1 ? expf(b - lmax) : 0.0f);
}

/* 1 when group g of `groups` equal groups of logits l[0..n) is one of the `pick` best by
 * mp_group_score (ties to the lower group index). O(groups·n). */
static inline MP_HD int mp_group_kept(const float *l, int n, int groups, int pick, int g,
                                      float lmax)
{
    int size = n / groups, better = 0;
    float sg = mp_group_score(l, g * size, size, lmax);
    for (int h = 0; h < groups && better < pick; h++) {
        float sh = mp_group_score(l, h * size, size, lmax);
        better += sh > sg || (sh == sg && h < g);
    }
    return better < pick;
}

/* mp_topk_select limited to groups (--group-limit G:M): v[0..n) forms `groups` groups of n/groups
 * consecutive experts; only the experts of the `pick` best groups (mp_group_kept) compete for the
 * top k. groups <= 0 is mp_topk_select; with pick = groups the result is the same as it. */
static inline MP_HD void mp_topk_select_grouped(const float *v, int n, int k, int groups, int pick,
                                                int32_t *idx)
{
    if (groups <= 0) {
        mp_topk_select(v, n, k, idx);
        return;
    }
    float lmax = v[0];
    for (int e = 1; e < n; e++)
        lmax = v[e] > lmax ? v[e] : lmax;
    int size = n / groups, m = 0;
    for (int g = 0; g < groups; g++) {
        if (!mp_group_kept(v, n, groups, pick, g, lmax))
            continue;
        for (int e = g * size; e < (g + 1) * size; e++)
            mp_topk_insert(v, e, k, idx, &m);
    }
}

/* Weights of the chosen experts: softmax over all n logits, renormalised over the k chosen, which
 * equals a softmax over the chosen logits alone: w_j = exp(l_j − l_max) / Σ_chosen exp(l_i − l_max).
 * idx[0] holds the largest logit. */
static inline MP_HD void mp_topk_weights(const float *logits, int k, const int32_t *idx, float *w)
{
    float lmax = logits[idx[0]];
    float sum = 0.0f;
    for (int j = 0; j < k; j++) {
        w[j] = expf(logits[idx[j]] - lmax);
        sum += w[j];
    }
    for (int j = 0; j < k; j++)
        w[j] /= sum;
}

#endif
