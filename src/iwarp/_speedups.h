/*
 * What the source files of iwarp._speedups share.
 *
 * _speedups.c   CRC-32C and the framing/scanning/placement kernels; it
 *               creates the module and adds the other files' functions.
 * _lanes.c      the whole-message send and receive lanes.
 * _decode.c     the capture analyzer's per-segment loops.
 * _small.c      the small-message lane: a one-segment Send framed, or
 *               checked and placed, in one call.
 * _fastpath.c   the fast-path object of one queue pair (FastPath), built on
 *               _small.c's framing and checks.
 * _qpbase.c     the queue pair's per-message calls (QueuePairBase), on a
 *               FastPath while one runs.
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

/* One direction's MPA framing: markers and CRC as negotiated, and the
 * marker phase of the next octet (RFC 5044 §4.3). */
typedef struct {
    int markers, crc;
    unsigned phase;
} IwFraming;

/* The FPDU of the ULPDU header + payload (RFC 5044 §4.1, §4.3) as a new
 * bytes object, its first octet at f->phase; f->phase moves past it. NULL
 * with ValueError when it cannot be framed (a ULPDU over 16 bits, a marker's
 * FPDUPTR over 16 bits), or MemoryError (_small.c). */
PyObject *iw_small_frame(IwFraming *f, const uint8_t *header, size_t hlen,
                         const uint8_t *payload, size_t plen);

/* What a one-segment Send must carry to be taken without the cores
 * (RFC 5041 §4.3, RFC 5040 §4.2): ULPDU_Length <= limit, DDP version, the
 * expected MSN, RDMAP control octet send or send_se. */
typedef struct {
    Py_ssize_t limit, version;
    uint32_t msn;
    Py_ssize_t send, send_se;
} IwSendWant;

/* A received FPDU iw_small_check took: its octets on the wire, its
 * payload's length, its RDMAP control octet. */
typedef struct {
    size_t wire, length;
    unsigned rdmap;
} IwSmallSend;

/* 1 when p[0..size) starts with one whole FPDU framed from f->phase (every
 * marker and the CRC right) that is a one-segment Send as `want` says,
 * with *out filled; 0 otherwise (nothing read past p + size). */
int iw_small_check(const IwFraming *f, const IwSendWant *want, const uint8_t *p, size_t size,
                   IwSmallSend *out);

/* Copies the payload of the FPDU at p that iw_small_check took to dst,
 * markers skipped (dst must not overlap p). */
void iw_small_payload(const IwFraming *f, const uint8_t *p, const IwSmallSend *fpdu,
                      uint8_t *dst);

/* Adds the FastPath type to the module (_fastpath.c); -1 on error. */
int iw_fastpath_add(PyObject *module);

/* For QueuePairBase (_qpbase.c): whether obj is exactly a FastPath, and its
 * send and receive methods on one (its `octets` and `rest` after a receive
 * are stored through the pointers, whatever the result). */
int iw_is_fastpath(PyObject *obj);
PyObject *iw_fastpath_send(PyObject *fast, PyObject *data, int solicited);
PyObject *iw_fastpath_receive(PyObject *fast, PyObject *data, Py_ssize_t *octets,
                              Py_ssize_t *rest);

/* Adds the QueuePairBase type to the module (_qpbase.c); -1 on error. */
int iw_qpbase_add(PyObject *module);

#endif
