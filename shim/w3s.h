/* w3s.h: the game side of the step protocol.
 *
 * A game attaches to its range of rows from the environment the supervisor gives it,
 * fills a row, posts it, rings the obs doorbell once for all the rows it posted, and
 * waits for the answers. Every function returns 0 on success and -1 on failure with
 * a message naming the call and the cause in the caller's buffer (errno's text on
 * Linux, GetLastError() under Windows).
 *
 * Environment (set by the supervisor, w3async/runtime_*.py):
 *   W3S_SHM       the segment's name ("/w3a-..."), native games
 *   W3S_SHM_PATH  the segment as a Windows path ("Z:\dev\shm\w3a-..."), Windows games
 *   W3S_ROW0, W3S_NROWS   this process's rows
 *   W3S_LANES, W3S_SIDES  its lanes and agent sides a lane: side s of lane l is row W3S_SIDES*l + s
 *   W3S_ROW_SHAPE  the rows' shape, "e_max f_ent g_glob n_heads head_max" (also in the
 *                  table's header: w3s_layout_of() after attach)
 *   W3S_OBS_FD, W3S_ACT_FD       inherited: a pipe's write end and an eventfd, native games
 *   W3S_OBS_FIFO, W3S_ACT_FIFO   FIFO paths ("Z:\...\obs-3.fifo"), Windows games
 *   W3S_PARENT_PID  the supervisor's pid: a native game exits when it goes away
 */
#ifndef W3S_H
#define W3S_H

#include <stddef.h>
#include <stdint.h>

#include "w3s_table.h"

typedef struct w3s_conn w3s_conn;

/* Attach from the environment: map the table, check its magic, version and layout
 * hash against this build, open the doorbells. On failure *out is NULL, err says
 * why, and the return value is the exit code the game should use (W3S_EXIT_ATTACH or
 * W3S_EXIT_LAYOUT). Under Windows it also sets the process's last-chance exception
 * filter: an exception nobody handles prints its code and address and exits
 * W3S_EXIT_CRASH (a filter the game sets later replaces it). */
int w3s_attach(w3s_conn **out, char *err, size_t errlen);

/* This process's rows: index 0 .. w3s_nrows()-1 (not the table index). */
uint32_t w3s_nrows(const w3s_conn *c);
w3s_row *w3s_row_at(w3s_conn *c, uint32_t i);
const w3s_header *w3s_header_of(const w3s_conn *c);

/* The run's row shape and its offsets: fill a row through w3s_glob(L, row),
 * w3s_ent(L, row, e), w3s_ent_type(L, row) and w3s_mask(L, row, head) (w3s_table.h). */
const w3s_layout *w3s_layout_of(const w3s_conn *c);

/* 0 when the run's rows have this shape (f_ent is not compared when e_max is 0), else
 * -1 and err naming both: a game written for one shape calls it after w3s_attach and
 * exits W3S_EXIT_LAYOUT on -1 (a recipe whose [spec] declares another shape). */
int w3s_check_shape(const w3s_conn *c, uint32_t e_max, uint32_t f_ent, uint32_t g_glob, uint32_t n_heads,
                    uint32_t head_max, char *err, size_t errlen);

/* Mark row i as posted: writes row_magic, then obs_seq + 1 with a release store.
 * Fill every observation field before. Does not ring: call w3s_ring once after
 * posting a step's rows. */
void w3s_post(w3s_conn *c, uint32_t i);

/* Ring the obs doorbell: the supervisor scans this process's rows. */
int w3s_ring(w3s_conn *c, char *err, size_t errlen);

/* Wait until every posted row is answered (act_seq == obs_seq). Returns 0 when
 * answered, 1 when the supervisor asked the games to stop (the game should exit with
 * W3S_EXIT_OK), -1 on error (the doorbell failed or the supervisor went away). */
int w3s_wait(w3s_conn *c, char *err, size_t errlen);

/* One step's exchange for a game that posts all of its rows every step: post rows
 * 0..nrows-1 (fill them first), ring once, wait for every answer. Returns what
 * w3s_wait returns, or -1 when the ring failed (err filled either way). */
int w3s_exchange(w3s_conn *c, char *err, size_t errlen);

/* Unmap and close; safe on NULL. */
void w3s_detach(w3s_conn *c);

/* Read an integer from the environment, or dflt when unset; -1 and err on garbage. */
int w3s_env_int(const char *name, long dflt, long *out, char *err, size_t errlen);

#ifdef _WIN32
#include <windows.h>
/* "access violation", "stack overflow", ... for a Windows exception code, NULL for
 * one that is not a crash (shared with the injection hook). */
const char *w3s_exception_name(unsigned long code);
/* "access violation (0xc0000005) writing address 0x0 at game.exe+0x1234". */
void w3s_describe_exception(const EXCEPTION_RECORD *r, char *out, size_t n);
/* The last-chance filter w3s_attach sets (the hook sets it at its set-up, before). */
LONG WINAPI w3s_on_crash(EXCEPTION_POINTERS *ep);
#endif

#endif
