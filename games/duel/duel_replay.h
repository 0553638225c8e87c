/* duel_replay.h: replay files (setup, seed, both sides' orders per step, the state
 * hash after each step, optionally the full state), written while a game plays and
 * read back by `duel --play-replay` and w3async/replay.py.
 *
 * Little-endian, every record closed by a CRC-32 (zlib's) of its bytes:
 *   header (64 bytes): "W3DREPL1", u32 version, u32 header size, u32 map,
 *     u32 step_turns, u32 time_limit_turns, u32 flags (1: states), u64 seed,
 *     u32 lane, u32 episode, u32 side controller[2], u32 reward mode, u32 crc
 *   step record: u32 "STEP", u32 step, i32 orders[2][4] (train, cmd, group, focus id),
 *     u64 hash after the step, u32 n_units (0 without states), then with states
 *     DU_REC_LANE_FIELDS i32 lane fields and n_units x DU_REC_UNIT_FIELDS i32, u32 crc
 *   end record: u32 "END!", u32 steps, i32 winner, i32 end reason, u64 hash, u32 crc
 * docs/duel.md lists the fields by name (w3async/replay.py names them the same). */
#ifndef DUEL_REPLAY_H
#define DUEL_REPLAY_H

#include <stdio.h>

#include "duel.h"

#define DU_REC_MAGIC "W3DREPL1"
#define DU_REC_VERSION 1u
#define DU_REC_HEADER 64
#define DU_REC_STEP 0x50455453u /* "STEP" */
#define DU_REC_END 0x21444E45u  /* "END!" */
#define DU_REC_LANE_FIELDS 21
#define DU_REC_UNIT_FIELDS 16

typedef struct du_rec_header {
    du_setup setup;
    uint32_t flags, lane, episode, ctl[2], reward_mode;
} du_rec_header;

typedef struct du_rec {
    FILE *f;
    char path[1024], tmp[1040];
    int states;
} du_rec;

/* Opens path + ".part" for writing and writes the header; 0, or -1 with err. */
int du_rec_open(du_rec *r, const char *path, const du_rec_header *h, char *err, size_t errlen);
int du_rec_step(du_rec *r, const du_lane *l, int32_t step, const du_orders o[2], uint64_t hash);
/* Writes the end record, closes and renames to the final path. */
int du_rec_close(du_rec *r, const du_lane *l, char *err, size_t errlen);
/* Closes without finishing (the .part file stays). */
void du_rec_abort(du_rec *r);

typedef struct du_play {
    FILE *f;
    const char *path;
    du_rec_header h;
    long offset;
    int32_t n_read;
} du_play;

int du_play_open(du_play *p, const char *path, char *err, size_t errlen);
/* Reads the next step's orders: 1 a step, 0 at the end record, -1 on error (err names
 * the file, the offset and the field). */
int du_play_next(du_play *p, int32_t *step, du_orders o[2], char *err, size_t errlen);
void du_play_close(du_play *p);

uint32_t du_crc32(uint32_t crc, const void *data, size_t n);

#endif
