/*
 * What the source files of iwarp._speedups share.
 *
 * _speedups.c   CRC-32C and the framing/scanning/placement kernels; it
 *               creates the module and adds the other files' functions.
 * _lanes.c      the whole-message send and receive lanes.
 * _decode.c     the capture analyzer's per-segment loops.
 * _small.c      the small-message lane: a one-segment Send framed, or
 *               checked and placed, in one call.
 *
 * The wire layout they read and write (FPDU geometry, markers, byte order,
 * MPA/DDP/RDMAP constants) is _wire.h's, once.
 */
#ifndef IWARP_SPEEDUPS_H
#define IWARP_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

/* CRC-32C (RFC 3385) over n octets, continuing from a raw state: start
 * from ~value and complement the result, as py_crc32c does. */
uint32_t iw_crc32c(uint32_t state, const uint8_t *p, size_t n);

/* Whether an output buffer may not be written while reading an input: both
 * non-empty and views of one object, or sharing an octet (_speedups.c). */
int iw_overlaps(const Py_buffer *a, const Py_buffer *b);

/* Each file's functions, each table ended by a {NULL} entry. */
extern PyMethodDef iw_lane_methods[];
extern PyMethodDef iw_decode_methods[];
extern PyMethodDef iw_small_methods[];

#endif
