/* rng.h - counter-based random numbers: any value is a pure function of (seed, stream, index), so
 * every rank can generate its own slice of weights, activations and routing and the reference can
 * rebuild the whole layer without communication. */
#ifndef MP_RNG_H
#define MP_RNG_H

#include <math.h>
#include <stdint.h>

/* SplitMix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
 * OOPSLA 2014): a bijective 64-bit mix with full avalanche. */
static inline uint64_t mp_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Hash of a (seed, a, b, c) tuple: chain of mixes, so distinct tuples give independent streams. */
static inline uint64_t mp_hash4(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    return mp_mix64(mp_mix64(mp_mix64(mp_mix64(seed) ^ a) ^ b) ^ c);
}

/* Uniform double in the open interval (0, 1) from 53 high bits of h. */
static inline double mp_u01(uint64_t h)
{
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Standard normal from two hashes (Box-Muller). */
static inline double mp_normal(uint64_t h1, uint64_t h2)
{
    double u1 = mp_u01(h1), u2 = mp_u01(h2);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A small sequential generator for places that draw many numbers from one stream. */
struct mp_rng {
    uint64_t state;
};
static inline void mp_rng_seed(struct mp_rng *r, uint64_t seed) { r->state = mp_mix64(seed); }
static inline uint64_t mp_rng_next(struct mp_rng *r)
{
    r->state += 0x9e3779b97f4a7c15ull;
    uint64_t z = r->state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline double mp_rng_u01(struct mp_rng *r) { return mp_u01(mp_rng_next(r)); }

#endif
