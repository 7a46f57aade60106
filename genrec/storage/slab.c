/* The slab store's loops (genrec/storage/slab.py builds and loads this file through
 * genrec.embedding.dynamic.native, and calls it through ctypes, which releases the interpreter lock during each
 * call: a write-back thread inside slab_put does not stop the training thread's Python).
 *
 * The file is an array of slots of slot_bytes = 8 + record_bytes: the row's int64 ID, then its record. The index
 * maps an ID to its slot in memory: an open-addressing table (linear probing, no tombstones: a deletion shifts the
 * following entries back) of n uint64 entries, each (fingerprint << 32) | (slot + 1), 0 meaning empty. The
 * fingerprint is the upper 32 bits of a 64-bit hash of the ID and the entry's home position is
 * (fingerprint * n) >> 32, so an entry carries its own home; two IDs share a fingerprint with probability 2^-32,
 * which is why a fingerprint match is confirmed by reading the slot's ID from the file (every indexed slot's ID is
 * on disk: a put writes its slots before it returns).
 *
 * Writes go in pieces of at most PIECE bytes that never cross a multiple of PIECE in the file: Linux sizes the
 * page-cache folios a write creates by its length, and a later small write into a large folio costs in proportion
 * to the folio (measured on ext4, kernel 6.18: 37 us per 552-byte random write into a file written in 4 MiB calls,
 * 3.2 / 3.6 / 4.2 / 5.2 us into one written in 4 / 8 / 16 / 32 KiB pieces, while appending in 16 KiB pieces costs
 * a quarter of the CPU of 4 KiB ones: 16 KiB).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SEED 0x51AB5EEDULL
#define PIECE 16384 /* the most bytes one write covers, ending at a multiple of it */
#define FULL (-1000000000LL) /* slab_put: the index would pass its limit; nothing was changed */

static inline uint64_t hash(uint64_t x) { /* SplitMix64's finalizer */
    x += SEED * 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static inline uint32_t fingerprint(int64_t id) { return (uint32_t)(hash((uint64_t)id) >> 32); }
static inline uint64_t home(uint32_t fp, uint64_t n) { return ((uint64_t)fp * n) >> 32; }
static inline int64_t slot_of(uint64_t entry) { return (int64_t)(entry & 0xFFFFFFFFULL) - 1; }

static int read_all(int fd, void *buf, int64_t bytes, int64_t offset) {
    char *p = buf;
    while (bytes > 0) {
        ssize_t got = pread(fd, p, (size_t)bytes, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -errno;
        if (got == 0) return -EIO; /* past the end: an indexed slot must exist */
        p += got, bytes -= got, offset += got;
    }
    return 0;
}

static int write_all(int fd, const void *buf, int64_t bytes, int64_t offset) {
    const char *p = buf;
    while (bytes > 0) {
        ssize_t put = pwrite(fd, p, (size_t)bytes, (off_t)offset);
        if (put < 0 && errno == EINTR) continue;
        if (put < 0) return -errno;
        p += put, bytes -= put, offset += put;
    }
    return 0;
}

/* Write bytes at offset in pieces that end at multiples of PIECE in the file. */
static int write_pages(int fd, const char *buf, int64_t bytes, int64_t offset) {
    while (bytes > 0) {
        int64_t piece = PIECE - offset % PIECE;
        if (piece > bytes) piece = bytes;
        int err = write_all(fd, buf, piece, offset);
        if (err) return err;
        buf += piece, bytes -= piece, offset += piece;
    }
    return 0;
}

/* Position of id's entry (-1: absent; then *free_at is the first empty position of its probe sequence). */
static int64_t find(const uint64_t *index, uint64_t n, int fd, int64_t slot_bytes, int64_t id, uint64_t *free_at,
                    int *err) {
    uint32_t fp = fingerprint(id);
    uint64_t p = home(fp, n);
    for (;;) {
        uint64_t entry = index[p];
        if (entry == 0) {
            *free_at = p;
            return -1;
        }
        if ((uint32_t)(entry >> 32) == fp) {
            int64_t stored;
            *err = read_all(fd, &stored, 8, slot_of(entry) * slot_bytes);
            if (*err) return -1;
            if (stored == id) return (int64_t)p;
        }
        if (++p == n) p = 0;
    }
}

static void insert(uint64_t *index, uint64_t n, int64_t id, int64_t slot) {
    uint32_t fp = fingerprint(id);
    uint64_t p = home(fp, n);
    while (index[p] != 0)
        if (++p == n) p = 0;
    index[p] = ((uint64_t)fp << 32) | (uint64_t)(slot + 1);
}

/* Remove the entry at position i, shifting back the entries after it that may move closer to their home. */
static void remove_at(uint64_t *index, uint64_t n, uint64_t i) {
    uint64_t j = i;
    for (;;) {
        if (++j == n) j = 0;
        uint64_t entry = index[j];
        if (entry == 0) break;
        uint64_t h = home((uint32_t)(entry >> 32), n);
        if ((j + n - h) % n >= (j + n - i) % n) { /* its home is not between the hole and j: it may fill the hole */
            index[i] = entry;
            i = j;
        }
    }
    index[i] = 0;
}

/* slots[k] = the slot of ids[k], -1 where absent. Returns 0 or -errno. */
int64_t slab_find(const uint64_t *index, uint64_t n, int fd, int64_t slot_bytes, const int64_t *ids, int64_t count,
                  int64_t *slots) {
    int err = 0;
    uint64_t unused;
    for (int64_t k = 0; k < count; k++) {
        int64_t p = find(index, n, fd, slot_bytes, ids[k], &unused, &err);
        if (err) return err;
        slots[k] = p < 0 ? -1 : slot_of(index[p]);
    }
    return 0;
}

/* live[k] = 1 when the index maps an ID with ids[k]'s fingerprint to slots[k]: with ids[k] read from slot slots[k]
 * of the file, whether that slot holds a live row (no file read: an indexed slot holds the ID it is indexed by). */
void slab_live(const uint64_t *index, uint64_t n, const int64_t *ids, const int64_t *slots, int64_t count,
               uint8_t *live) {
    for (int64_t k = 0; k < count; k++) {
        uint32_t fp = fingerprint(ids[k]);
        uint64_t p = home(fp, n), want = ((uint64_t)fp << 32) | (uint64_t)(slots[k] + 1);
        live[k] = 0;
        for (uint64_t entry; (entry = index[p]) != 0; p = p + 1 == n ? 0 : p + 1)
            if (entry == want) {
                live[k] = 1;
                break;
            }
    }
}

/* Index count rows read from a snapshot (ids[k] in slot slots[k]). Returns 0, -errno, or k + 1 when ids[k] is
 * already indexed (a corrupt snapshot: an ID in two slots). */
int64_t slab_index(uint64_t *index, uint64_t n, int fd, int64_t slot_bytes, const int64_t *ids, const int64_t *slots,
                   int64_t count) {
    int err = 0;
    uint64_t at;
    for (int64_t k = 0; k < count; k++) {
        if (find(index, n, fd, slot_bytes, ids[k], &at, &err) >= 0) return k + 1;
        if (err) return err;
        index[at] = ((uint64_t)fingerprint(ids[k]) << 32) | (uint64_t)(slots[k] + 1);
    }
    return 0;
}

/* The records of count IDs: found[k] = 1 and the record in out (the found ones in order, record_bytes each).
 * Returns the number found or -errno. */
int64_t slab_get(const uint64_t *index, uint64_t n, int fd, int64_t slot_bytes, const int64_t *ids, int64_t count,
                 uint8_t *found, uint8_t *out) {
    int err = 0;
    uint64_t unused;
    int64_t hits = 0, record_bytes = slot_bytes - 8;
    for (int64_t k = 0; k < count; k++) {
        int64_t p = find(index, n, fd, slot_bytes, ids[k], &unused, &err);
        if (err) return err;
        found[k] = p >= 0;
        if (p < 0) continue;
        err = read_all(fd, out + hits * record_bytes, record_bytes, slot_of(index[p]) * slot_bytes + 8);
        if (err) return err;
        hits++;
    }
    return hits;
}

/* Remove the IDs that are indexed; their slots go to freed (in order). Returns the number removed or -errno. */
int64_t slab_delete(uint64_t *index, uint64_t n, int fd, int64_t slot_bytes, const int64_t *ids, int64_t count,
                    int64_t *freed) {
    int err = 0;
    uint64_t unused;
    int64_t removed = 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t p = find(index, n, fd, slot_bytes, ids[k], &unused, &err);
        if (err) return err;
        if (p < 0) continue;
        freed[removed++] = slot_of(index[p]);
        remove_at(index, n, (uint64_t)p);
    }
    return removed;
}

static int by_slot(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Write count records under count distinct IDs: an indexed ID is overwritten in its slot; a new one takes the top
 * of the free stack (free[0 .. *free_top)), else slot *slots_used (the end of the file). Slots are written in order,
 * each run of consecutive slots in pieces (PIECE). Returns 0, -errno, or FULL when *live plus the new IDs would
 * pass max_live (then nothing has changed). Scratch from the caller (kept between calls: fresh pages would fault):
 * slots and order, count each; staged, count * slot_bytes. */
int64_t slab_put(uint64_t *index, uint64_t n, int fd, int64_t slot_bytes, const int64_t *ids, const uint8_t *records,
                 int64_t count, const int64_t *free_slots, int64_t *free_top, int64_t *slots_used, int64_t *live,
                 int64_t max_live, int64_t *slots, uint64_t *order, char *staged) {
    int64_t record_bytes = slot_bytes - 8, fresh = 0;
    int err = 0;
    uint64_t unused;
    for (int64_t k = 0; k < count; k++) { /* the index before this batch: every slot's ID is on disk */
        int64_t p = find(index, n, fd, slot_bytes, ids[k], &unused, &err);
        if (err) return err;
        slots[k] = p < 0 ? -1 : slot_of(index[p]);
        fresh += p < 0;
    }
    if (*live + fresh > max_live) return FULL;
    for (int64_t k = 0; k < count; k++) {
        if (slots[k] >= 0) continue;
        slots[k] = *free_top > 0 ? free_slots[--*free_top] : (*slots_used)++;
        insert(index, n, ids[k], slots[k]);
    }
    *live += fresh;
    for (int64_t k = 0; k < count; k++) order[k] = ((uint64_t)slots[k] << 32) | (uint64_t)k;
    qsort(order, (size_t)count, sizeof(uint64_t), by_slot);
    for (int64_t k = 0; k < count; k++) {
        int64_t i = (int64_t)(order[k] & 0xFFFFFFFFULL);
        memcpy(staged + k * slot_bytes, &ids[i], 8);
        memcpy(staged + k * slot_bytes + 8, records + i * record_bytes, (size_t)record_bytes);
    }
    for (int64_t start = 0, end; start < count; start = end) {
        int64_t first = (int64_t)(order[start] >> 32);
        for (end = start + 1; end < count && (int64_t)(order[end] >> 32) == first + (end - start); end++) {
        }
        err = write_pages(fd, staged + start * slot_bytes, (end - start) * slot_bytes, first * slot_bytes);
        if (err) return err;
    }
    return 0;
}

/* Copy bytes from src to dst (both at offset 0) in pieces (see the top: the copy becomes a live file whose slots
 * are rewritten one by one). Returns 0 or -errno. */
int64_t slab_copy(int src, int dst, int64_t bytes, char *buffer, int64_t buffer_bytes) {
    for (int64_t offset = 0; offset < bytes; offset += buffer_bytes) {
        int64_t chunk = bytes - offset < buffer_bytes ? bytes - offset : buffer_bytes;
        int err = read_all(src, buffer, chunk, offset);
        if (!err) err = write_pages(dst, buffer, chunk, offset);
        if (err) return err;
    }
    return 0;
}
