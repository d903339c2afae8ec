/* topk.h - top-k selection and softmax weights shared by the cpu and cuda gates (plain C, usable in
 * host and device code). */
#ifndef MP_TOPK_H
#define MP_TOPK_H

#include <math.h>
#include <stdint.h>

#include "hostdevice.h"

/* Indices of the k largest of v[0..n) in descending order of value, ties broken by lower index
 * (insertion into a sorted list of k: O(n·k), best for the k ≤ 16 of MoE gates). */
static inline MP_HD void mp_topk_select(const float *v, int n, int k, int32_t *idx)
{
    int m = 0;
    for (int e = 0; e < n; e++) {
        float x = v[e];
        if (m == k && !(x > v[idx[k - 1]]))
            continue;
        int pos = m < k ? m++ : k - 1;
        while (pos > 0 && x > v[idx[pos - 1]]) {
            idx[pos] = idx[pos - 1];
            pos--;
        }
        idx[pos] = e;
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
