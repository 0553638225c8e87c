/* duel_replay.c: replay files, see duel_replay.h for the format. */
#include "duel_replay.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

uint32_t du_crc32(uint32_t crc, const void *data, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    const uint8_t *p = data;
    crc = ~crc;
    while (n--)
        crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* A record is built in memory, then written with its CRC in one go. */
typedef struct du_buf {
    uint8_t b[16 + 4 * (DU_REC_LANE_FIELDS + DU_MAX_UNITS * DU_REC_UNIT_FIELDS) + 64];
    size_t n;
} du_buf;

static void du_put32(du_buf *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b->b[b->n++] = (uint8_t)(v >> (8 * i));
}

static void du_put64(du_buf *b, uint64_t v)
{
    du_put32(b, (uint32_t)v);
    du_put32(b, (uint32_t)(v >> 32));
}

static int du_buf_write(FILE *f, du_buf *b)
{
    du_put32(b, du_crc32(0, b->b, b->n));
    return fwrite(b->b, 1, b->n, f) == b->n ? 0 : -1;
}

int du_rec_open(du_rec *r, const char *path, const du_rec_header *h, char *err, size_t errlen)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->path, sizeof(r->path), "%s", path);
    snprintf(r->tmp, sizeof(r->tmp), "%s.part", path);
    r->states = (int)(h->flags & 1);
    r->f = fopen(r->tmp, "wb");
    if (!r->f) {
        snprintf(err, errlen, "duel: fopen(%s) failed: %s", r->tmp, strerror(errno));
        return -1;
    }
    du_buf b = {.n = 0};
    memcpy(b.b, DU_REC_MAGIC, 8);
    b.n = 8;
    du_put32(&b, DU_REC_VERSION);
    du_put32(&b, DU_REC_HEADER);
    du_put32(&b, (uint32_t)h->setup.map);
    du_put32(&b, (uint32_t)h->setup.step_turns);
    du_put32(&b, (uint32_t)h->setup.time_limit_turns);
    du_put32(&b, h->flags);
    du_put64(&b, h->setup.seed);
    du_put32(&b, h->lane);
    du_put32(&b, h->episode);
    du_put32(&b, h->ctl[0]);
    du_put32(&b, h->ctl[1]);
    du_put32(&b, h->reward_mode);
    if (du_buf_write(r->f, &b)) {
        snprintf(err, errlen, "duel: writing %s failed: %s", r->tmp, strerror(errno));
        du_rec_abort(r);
        return -1;
    }
    return 0;
}

int du_rec_step(du_rec *r, const du_lane *l, int32_t step, const du_orders o[2], uint64_t hash)
{
    du_buf b = {.n = 0};
    du_put32(&b, DU_REC_STEP);
    du_put32(&b, (uint32_t)step);
    for (int s = 0; s < 2; s++) {
        du_put32(&b, (uint32_t)o[s].train);
        du_put32(&b, (uint32_t)o[s].cmd);
        du_put32(&b, (uint32_t)o[s].group);
        du_put32(&b, (uint32_t)o[s].focus);
    }
    du_put64(&b, hash);
    du_put32(&b, r->states ? (uint32_t)l->n_units : 0u);
    if (r->states) {
        const int32_t lf[5] = {l->turn, l->winner, l->next_id, (int32_t)(uint32_t)l->rng, (int32_t)(l->rng >> 32)};
        for (int k = 0; k < 5; k++)
            du_put32(&b, (uint32_t)lf[k]);
        for (int s = 0; s < 2; s++) {
            const du_side *sd = &l->side[s];
            const int32_t f[8] = {sd->gold, sd->train_type, sd->train_left, sd->supply,
                                  sd->dmg_dealt, sd->dmg_taken, sd->kill_value, sd->loss_value};
            for (int k = 0; k < 8; k++)
                du_put32(&b, (uint32_t)f[k]);
        }
        for (int i = 0; i < l->n_units; i++) {
            const du_unit *u = &l->units[i];
            const int32_t f[DU_REC_UNIT_FIELDS] = {u->id, u->type, u->owner, u->order, u->x, u->y,
                                                   u->hp, u->cooldown, u->target, u->focus, u->dest, u->home,
                                                   u->last_hit_by, u->repath, u->path_len, u->path_pos};
            for (int k = 0; k < DU_REC_UNIT_FIELDS; k++)
                du_put32(&b, (uint32_t)f[k]);
        }
    }
    return du_buf_write(r->f, &b);
}

int du_rec_close(du_rec *r, const du_lane *l, char *err, size_t errlen)
{
    du_buf b = {.n = 0};
    du_put32(&b, DU_REC_END);
    du_put32(&b, (uint32_t)l->step);
    du_put32(&b, (uint32_t)l->winner);
    du_put32(&b, (uint32_t)l->end_reason);
    du_put64(&b, du_hash(l));
    int bad = du_buf_write(r->f, &b);
    bad |= fclose(r->f) != 0;
    r->f = NULL;
    if (bad) {
        snprintf(err, errlen, "duel: writing %s failed: %s", r->tmp, strerror(errno));
        return -1;
    }
    remove(r->path); /* Windows' rename does not replace */
    if (rename(r->tmp, r->path)) {
        snprintf(err, errlen, "duel: rename(%s, %s) failed: %s", r->tmp, r->path, strerror(errno));
        return -1;
    }
    return 0;
}

void du_rec_abort(du_rec *r)
{
    if (r->f)
        fclose(r->f);
    r->f = NULL;
}

/* ---- reading ---- */

static int du_read(du_play *p, void *dst, size_t n, const char *what, char *err, size_t errlen)
{
    size_t got = fread(dst, 1, n, p->f);
    if (got != n) {
        snprintf(err, errlen, "replay %s: truncated at offset %ld: %s needs %zu bytes, %zu left", p->path,
                 p->offset, what, n, got);
        return -1;
    }
    p->offset += (long)n;
    return 0;
}

static uint32_t du_get32(const uint8_t *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }
static uint64_t du_get64(const uint8_t *b) { return du_get32(b) | (uint64_t)du_get32(b + 4) << 32; }

int du_play_open(du_play *p, const char *path, char *err, size_t errlen)
{
    memset(p, 0, sizeof(*p));
    p->path = path;
    p->f = fopen(path, "rb");
    if (!p->f) {
        snprintf(err, errlen, "replay %s: fopen failed: %s", path, strerror(errno));
        return -1;
    }
    uint8_t b[DU_REC_HEADER];
    if (du_read(p, b, sizeof(b), "the header", err, errlen))
        return -1;
    if (memcmp(b, DU_REC_MAGIC, 8)) {
        snprintf(err, errlen, "replay %s: offset 0: field magic is not %s (not a duel replay)", path, DU_REC_MAGIC);
        return -1;
    }
    if (du_get32(b + 60) != du_crc32(0, b, 60)) {
        snprintf(err, errlen, "replay %s: offset 60: header crc %08x does not match its bytes (%08x): corrupted",
                 path, du_get32(b + 60), du_crc32(0, b, 60));
        return -1;
    }
    if (du_get32(b + 8) != DU_REC_VERSION) {
        snprintf(err, errlen, "replay %s: offset 8: field version is %u, this build reads %u", path,
                 du_get32(b + 8), DU_REC_VERSION);
        return -1;
    }
    du_rec_header *h = &p->h;
    h->setup.map = (int32_t)du_get32(b + 16);
    h->setup.step_turns = (int32_t)du_get32(b + 20);
    h->setup.time_limit_turns = (int32_t)du_get32(b + 24);
    h->flags = du_get32(b + 28);
    h->setup.seed = du_get64(b + 32);
    h->lane = du_get32(b + 40);
    h->episode = du_get32(b + 44);
    h->ctl[0] = du_get32(b + 48);
    h->ctl[1] = du_get32(b + 52);
    h->reward_mode = du_get32(b + 56);
    if (!du_map_get(h->setup.map) || h->setup.step_turns < 1 || h->setup.time_limit_turns < 1) {
        snprintf(err, errlen, "replay %s: offset 16: map %d, step_turns %d or time_limit_turns %d out of range",
                 path, h->setup.map, h->setup.step_turns, h->setup.time_limit_turns);
        return -1;
    }
    return 0;
}

int du_play_next(du_play *p, int32_t *step, du_orders o[2], char *err, size_t errlen)
{
    static uint8_t b[16 + 4 * (DU_REC_LANE_FIELDS + DU_MAX_UNITS * DU_REC_UNIT_FIELDS) + 64];
    long start = p->offset;
    if (du_read(p, b, 4, "a record tag", err, errlen))
        return -1;
    uint32_t tag = du_get32(b);
    size_t n = 4;
    if (tag == DU_REC_END) {
        if (du_read(p, b + 4, 20, "the end record", err, errlen))
            return -1;
        n = 24;
    } else if (tag == DU_REC_STEP) {
        if (du_read(p, b + 4, 48, "a step record", err, errlen))
            return -1;
        uint32_t nu = du_get32(b + 48);
        n = 52;
        if (nu > DU_MAX_UNITS) {
            snprintf(err, errlen, "replay %s: offset %ld: field n_units is %u, at most %d", p->path, start + 48, nu,
                     DU_MAX_UNITS);
            return -1;
        }
        if (nu || (p->h.flags & 1)) {
            size_t extra = 4 * (DU_REC_LANE_FIELDS + (size_t)nu * DU_REC_UNIT_FIELDS);
            if (du_read(p, b + n, extra, "the step's state", err, errlen))
                return -1;
            n += extra;
        }
    } else {
        snprintf(err, errlen, "replay %s: offset %ld: field tag is %08x, expected a step or end record", p->path,
                 start, tag);
        return -1;
    }
    if (du_read(p, b + n, 4, "the record's crc", err, errlen))
        return -1;
    if (du_get32(b + n) != du_crc32(0, b, n)) {
        snprintf(err, errlen, "replay %s: offset %ld: crc of record %d does not match its bytes: corrupted", p->path,
                 start, p->n_read);
        return -1;
    }
    if (tag == DU_REC_END)
        return 0;
    *step = (int32_t)du_get32(b + 4);
    if (*step != p->n_read) {
        snprintf(err, errlen, "replay %s: offset %ld: field step is %d, expected %d", p->path, start + 4, *step,
                 p->n_read);
        return -1;
    }
    for (int s = 0; s < 2; s++) {
        o[s].train = (int32_t)du_get32(b + 8 + 16 * s);
        o[s].cmd = (int32_t)du_get32(b + 12 + 16 * s);
        o[s].group = (int32_t)du_get32(b + 16 + 16 * s);
        o[s].focus = (int32_t)du_get32(b + 20 + 16 * s);
    }
    p->n_read++;
    return 1;
}

void du_play_close(du_play *p)
{
    if (p->f)
        fclose(p->f);
    p->f = NULL;
}
