/* Compiled kernels of the dynamic table (genrec/embedding/dynamic/native.py builds and loads this file).
 *
 * Each function is the loop of one numpy routine of the package, computing the same values bit for bit (the numpy
 * versions stay as the reference and the fallback): SplitMix64 (hashing.mix64), the open-addressing slot map
 * (slot_map.SlotMap), the Bloom filter (bloom.BloomFilter), the count-min sketch (admission.CountMinSketch) and
 * the deterministic row init (hashing.init_rows). They are called through ctypes, which releases the interpreter
 * lock for the duration of the call: a prefetch thread running them does not stop the training thread's Python.
 * Arrays are C-contiguous; int64 IDs are read as uint64 words, as numpy's view(np.uint64) does.
 * Built with -ffp-contract=off so that init_rows rounds like numpy (a float32 multiply, then a float32 subtract).
 */
#include <stdint.h>

#define GOLDEN 0x9E3779B97F4A7C15ULL
#define M1 0xBF58476D1CE4E5B9ULL
#define M2 0x94D049BB133111EBULL
#define COLUMN 0xD1B54A32D192ED03ULL
#define EMPTY (-1)
#define DELETED (-2)

static inline uint64_t mix(uint64_t x, uint64_t seed) {
    x += seed * GOLDEN;
    x = (x ^ (x >> 30)) * M1;
    x = (x ^ (x >> 27)) * M2;
    return x ^ (x >> 31);
}

void genrec_mix64(const uint64_t *ids, int64_t n, uint64_t seed, uint64_t *out) {
    for (int64_t i = 0; i < n; i++) out[i] = mix(ids[i], seed);
}

/* SlotMap: entries (size, 2) = (key, value); value EMPTY / DELETED / a slot >= 0; size = mask + 1. */
void genrec_slot_find(const int64_t *entries, uint64_t mask, uint64_t seed, const int64_t *ids, int64_t n,
                      int64_t *values, int64_t *where) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t p = mix((uint64_t)ids[i], seed) & mask;
        values[i] = EMPTY;
        where[i] = -1;
        for (;;) {
            int64_t value = entries[2 * p + 1];
            if (value == EMPTY) break;
            if (value >= 0 && entries[2 * p] == ids[i]) {
                values[i] = value;
                where[i] = (int64_t)p;
                break;
            }
            p = (p + 1) & mask;
        }
    }
}

/* Insert IDs absent from the map at the first free (EMPTY or DELETED) position; returns the DELETED ones reused. */
int64_t genrec_slot_insert(int64_t *entries, uint64_t mask, uint64_t seed, const int64_t *ids,
                           const int64_t *values, int64_t n) {
    int64_t reused = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t p = mix((uint64_t)ids[i], seed) & mask;
        while (entries[2 * p + 1] >= 0) p = (p + 1) & mask;
        reused += entries[2 * p + 1] == DELETED;
        entries[2 * p] = ids[i];
        entries[2 * p + 1] = values[i];
    }
    return reused;
}

/* Bloom filter over words (bits = mask + 1): hash h of an ID sets bit mix(id, seed + h) & mask. */
void genrec_bloom_add(uint64_t *words, uint64_t mask, int64_t hashes, uint64_t seed, const uint64_t *ids,
                      int64_t n) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < hashes; h++) {
            uint64_t bit = mix(ids[i], seed + (uint64_t)h) & mask;
            words[bit >> 6] |= 1ULL << (bit & 63);
        }
}

void genrec_bloom_maybe(const uint64_t *words, uint64_t mask, int64_t hashes, uint64_t seed, const uint64_t *ids,
                        int64_t n, uint8_t *out) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t all = 1;
        for (int64_t h = 0; h < hashes && all; h++) {
            uint64_t bit = mix(ids[i], seed + (uint64_t)h) & mask;
            all = (words[bit >> 6] >> (bit & 63)) & 1;
        }
        out[i] = all;
    }
}

/* Count-min sketch counts (depth, width): add every ID's count (when add is not NULL) to its counter in each row,
 * then (when estimates is not NULL) read each ID's minimum over the rows, after all the adds (as numpy's add.at
 * followed by a gather). */
void genrec_sketch_add(int64_t *counts, int64_t width, int64_t depth, uint64_t seed, const uint64_t *ids,
                       const int64_t *add, int64_t n, int64_t *estimates) {
    if (add)
        for (int64_t r = 0; r < depth; r++)
            for (int64_t i = 0; i < n; i++)
                counts[r * width + (int64_t)(mix(ids[i], seed + (uint64_t)r) % (uint64_t)width)] += add[i];
    if (!estimates) return;
    for (int64_t i = 0; i < n; i++) {
        int64_t low = INT64_MAX;
        for (int64_t r = 0; r < depth; r++) {
            int64_t c = counts[r * width + (int64_t)(mix(ids[i], seed + (uint64_t)r) % (uint64_t)width)];
            if (c < low) low = c;
        }
        estimates[i] = low;
    }
}

/* Row i, columns (2k, 2k + 1): h = mix(mix(id_i, seed) + (k + 1) * COLUMN, 0); bits 40..63 and 8..31 of h,
 * scaled to [-bound, bound) in float32. */
void genrec_init_rows(const uint64_t *ids, int64_t n, int64_t dim, uint64_t seed, double bound, float *out) {
    const float scale = (float)(2.0 * bound * 0x1p-24), shift = (float)bound;
    const int64_t pairs = (dim + 1) / 2;
    for (int64_t i = 0; i < n; i++) {
        uint64_t base = mix(ids[i], seed);
        float *row = out + i * dim;
        for (int64_t k = 0; k < pairs; k++) {
            uint64_t h = mix(base + (uint64_t)(k + 1) * COLUMN, 0);
            float even = (float)(h >> 40), odd = (float)((h >> 8) & 0xFFFFFFULL);
            even = even * scale;
            row[2 * k] = even - shift;
            if (2 * k + 1 < dim) {
                odd = odd * scale;
                row[2 * k + 1] = odd - shift;
            }
        }
    }
}
