/*
 * iwarp._speedups, the whole-message lanes: a message's FPDUs written with
 * sendmsg from the caller's buffer, and a receive ring whose complete FPDUs
 * are checked and placed into windows the cores published.
 *
 * send_lane(...)   the FPDUs of one DDP message (a run of segments, RFC 5041
 *                  §5.2, framed as RFC 5044 §4-§6) written to a socket with
 *                  sendmsg: per FPDU a head (marker, ULPDU_Length, DDP/RDMAP
 *                  header) and a tail (PAD, marker, CRC) built in a scratch
 *                  area, the payload as iovecs pointing into the caller's
 *                  buffer (no copy of it here). Resumable: the caller keeps
 *                  the count of octets the kernel took (`skip`), which is
 *                  the whole cursor. The octets on the wire are exactly
 *                  frame_run's for the same arguments.
 *
 * The protocol's decisions (which message, MSN, completions, the stream
 * position) stay with the Python cores; this file only moves octets.
 */
#include "_speedups.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#define LANE_MARKER_INTERVAL 512u
#define LANE_PHASE_MASK 511u
#define LANE_MARKER_STRIDE 508u
/* iovecs per sendmsg (Linux IOV_MAX is 1024) and scratch octets per batch */
#define LANE_IOV 1024
#define LANE_SCRATCH (64 * 1024)

/* What a run of segments is (the arguments of frame_run). */
typedef struct {
    const uint8_t *header;
    size_t hlen;
    const uint8_t *payload;
    size_t plen;
    size_t start, stop, room;
    size_t field_at, field_size;
    uint64_t base;
    uint8_t last_mask;
    int markers, crc;
} LaneRun;

/* Payload octets of the segment that starts at `offset`. */
static inline size_t seg_len(const LaneRun *r, size_t offset)
{
    size_t left = r->stop - offset;
    return left < r->room ? left : r->room;
}

/* Octets on the wire of an FPDU whose ULPDU has `ulpdu` octets and whose
 * first octet is at `phase` (mod 512) from the marker origin; as
 * mpa.framing.fpdu_wire_size. */
static size_t fpdu_wire(size_t ulpdu, unsigned phase, int markers)
{
    size_t content = 6 + ulpdu + ((4 - ((2 + ulpdu) & 3)) & 3);
    if (!markers)
        return content;
    size_t lead = phase == 0 ? 4 : 0;
    size_t at = LANE_MARKER_INTERVAL - ((phase + lead) & LANE_PHASE_MASK);
    if (at >= content)
        return lead + content;
    return lead + content + 4 * ((content - at + LANE_MARKER_STRIDE - 1) / LANE_MARKER_STRIDE);
}

/* One sendmsg's worth of iovecs, heads and tails in `scratch`. */
typedef struct {
    struct iovec *iov;
    int niov;
    uint8_t *scratch;
    size_t used;
    size_t bytes;
    /* the FPDU being built */
    unsigned phase;    /* of the next wire octet */
    size_t since_len;  /* wire octets since its ULPDU_Length field began */
    uint32_t crc;      /* running CRC state (inverted) */
} Batch;

static void emit_scratch(Batch *b, const uint8_t *src, size_t n)
{
    uint8_t *dst = b->scratch + b->used;
    memcpy(dst, src, n);
    struct iovec *last = b->niov ? &b->iov[b->niov - 1] : NULL;
    if (last != NULL && (uint8_t *)last->iov_base + last->iov_len == dst) {
        last->iov_len += n;
    } else {
        b->iov[b->niov].iov_base = dst;
        b->iov[b->niov].iov_len = n;
        b->niov++;
    }
    b->used += n;
}

static void emit_user(Batch *b, const uint8_t *src, size_t n)
{
    b->iov[b->niov].iov_base = (void *)src;
    b->iov[b->niov].iov_len = n;
    b->niov++;
}

static void emit_marker(Batch *b, int do_crc, unsigned ptr)
{
    uint8_t m[4] = {0, 0, (uint8_t)(ptr >> 8), (uint8_t)ptr};
    emit_scratch(b, m, 4);
    if (do_crc)
        b->crc = iw_crc32c(b->crc, m, 4);
    b->bytes += 4;
    b->phase = (b->phase + 4) & LANE_PHASE_MASK;
    b->since_len += 4;
}

/* n octets of FPDU content, a marker before every one at phase 0. */
static void emit(Batch *b, const LaneRun *r, const uint8_t *src, size_t n, int user)
{
    while (n) {
        if (r->markers && b->phase == 0)
            emit_marker(b, r->crc, (unsigned)b->since_len);
        size_t k = r->markers ? LANE_MARKER_INTERVAL - b->phase : n;
        if (k > n)
            k = n;
        if (user)
            emit_user(b, src, k);
        else
            emit_scratch(b, src, k);
        if (r->crc)
            b->crc = iw_crc32c(b->crc, src, k);
        b->bytes += k;
        b->since_len += k;
        b->phase = (unsigned)((b->phase + k) & LANE_PHASE_MASK);
        src += k;
        n -= k;
    }
}

/* Whether an FPDU of `wire` octets still fits the batch (worst case). */
static int batch_fits(const Batch *b, size_t wire)
{
    size_t markers = wire / LANE_MARKER_STRIDE + 3;
    return (size_t)b->niov + 2 * markers + 6 <= LANE_IOV &&
           b->used + 48 + 4 * markers <= LANE_SCRATCH;
}

/* The FPDU of the segment at `offset`, starting at the batch's phase. */
static void emit_fpdu(Batch *b, const LaneRun *r, size_t offset)
{
    static const uint8_t zeros[4] = {0, 0, 0, 0};
    size_t n = seg_len(r, offset);
    size_t ulpdu = r->hlen + n;
    b->crc = 0xFFFFFFFFu;
    b->since_len = 0;
    if (r->markers && b->phase == 0) /* RFC 5044 §4.3: FPDUPTR 0, CRC'd with this FPDU */
        emit_marker(b, r->crc, 0);
    b->since_len = 0;
    uint8_t head[2 + 32];
    head[0] = (uint8_t)(ulpdu >> 8);
    head[1] = (uint8_t)ulpdu;
    memcpy(head + 2, r->header, r->hlen);
    uint64_t value = r->base + (uint64_t)offset;
    for (size_t k = r->field_size; k-- > 0;) {
        head[2 + r->field_at + k] = (uint8_t)value;
        value >>= 8;
    }
    if (offset + n == r->plen)
        head[2] |= r->last_mask;
    emit(b, r, head, 2 + r->hlen, 0);
    emit(b, r, r->payload + offset, n, 1);
    emit(b, r, zeros, (4 - ((2 + ulpdu) & 3)) & 3, 0);
    if (r->markers && b->phase == 0) /* a marker right before the CRC */
        emit_marker(b, r->crc, (unsigned)b->since_len);
    uint32_t crc = r->crc ? ~b->crc : 0;
    uint8_t tail[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16),
                       (uint8_t)(crc >> 24)};
    emit_scratch(b, tail, 4);
    b->bytes += 4;
    b->phase = (b->phase + 4) & LANE_PHASE_MASK;
}

/* Drop the first n octets of the batch's iovecs. */
static void consume(Batch *b, size_t n)
{
    int i = 0;
    while (n && i < b->niov) {
        if (n >= b->iov[i].iov_len) {
            n -= b->iov[i].iov_len;
            i++;
        } else {
            b->iov[i].iov_base = (uint8_t *)b->iov[i].iov_base + n;
            b->iov[i].iov_len -= n;
            n = 0;
        }
    }
    if (i) {
        memmove(b->iov, b->iov + i, (size_t)(b->niov - i) * sizeof(struct iovec));
        b->niov -= i;
    }
}

/* Keep at most n octets of the batch's iovecs. */
static void truncate_to(Batch *b, size_t n)
{
    size_t total = 0;
    for (int i = 0; i < b->niov; i++) {
        if (b->iov[i].iov_len >= n - total) {
            b->iov[i].iov_len = n - total;
            b->niov = b->iov[i].iov_len ? i + 1 : i;
            return;
        }
        total += b->iov[i].iov_len;
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

enum { LANE_DONE = 0, LANE_FULL = 1, LANE_INPUT = 2 };

typedef struct {
    size_t sent;  /* octets the kernel took in this call */
    int state;    /* LANE_* */
    int error;    /* errno of a failed sendmsg, else 0 */
} LaneResult;

/*
 * Write the run's wire octets [skip, min(total, skip + limit)) to fd.
 * Runs without the GIL: touches only the run's buffers and its own memory.
 */
static LaneResult lane_write(const LaneRun *r, unsigned phase0, size_t total, size_t skip,
                             size_t limit, int fd, uint8_t *copy_to, int wait_ms,
                             int watch_input, struct iovec *iov, uint8_t *scratch)
{
    LaneResult res = {0, LANE_DONE, 0};
    size_t end = total - skip > limit ? skip + limit : total;
    double deadline = wait_ms > 0 ? now_ms() + wait_ms : 0.0;
    /* Find the FPDU holding octet `skip`: sizes only, no CRC. */
    size_t offset = r->start, wpos = 0;
    unsigned phase = phase0;
    for (;;) {
        size_t n = seg_len(r, offset);
        size_t w = fpdu_wire(r->hlen + n, phase, r->markers);
        if (wpos + w > skip || offset + n >= r->stop)
            break;
        wpos += w;
        phase = (unsigned)((phase + w) & LANE_PHASE_MASK);
        offset += n;
    }
    size_t pos = skip;
    Batch b = {iov, 0, scratch, 0, 0, phase, 0, 0};
    while (pos < end) {
        if (b.niov == 0) {
            /* Build the next batch from the FPDU at `offset` (wire `wpos`). */
            b.used = 0;
            b.bytes = 0;
            size_t first = wpos;
            for (;;) {
                size_t n = seg_len(r, offset);
                size_t w = fpdu_wire(r->hlen + n, b.phase, r->markers);
                if (b.niov && (!batch_fits(&b, w) || first + b.bytes >= end))
                    break;
                emit_fpdu(&b, r, offset);
                wpos += w;
                offset += n;
                if (offset >= r->stop)
                    break;
            }
            consume(&b, pos - first);
            truncate_to(&b, end - pos);
        }
        ssize_t got;
        if (copy_to != NULL) { /* into memory: the whole batch (limit bounds it) */
            size_t k = 0;
            for (int v = 0; v < b.niov; v++) {
                memcpy(copy_to + res.sent + k, b.iov[v].iov_base, b.iov[v].iov_len);
                k += b.iov[v].iov_len;
            }
            got = (ssize_t)k;
        } else {
            struct msghdr msg;
            memset(&msg, 0, sizeof msg);
            msg.msg_iov = b.iov;
            msg.msg_iovlen = (size_t)b.niov;
            got = sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        if (got > 0) {
            consume(&b, (size_t)got);
            pos += (size_t)got;
            res.sent += (size_t)got;
            continue;
        }
        if (got == 0) {
            res.state = LANE_FULL;
            return res;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            res.error = errno;
            return res;
        }
        /* The socket is full: wait for room, or for input, or give up. */
        int timeout;
        if (wait_ms == 0) {
            res.state = LANE_FULL;
            return res;
        } else if (wait_ms < 0) {
            timeout = -1;
        } else {
            double left = deadline - now_ms();
            if (left <= 0) {
                res.state = LANE_FULL;
                return res;
            }
            timeout = (int)left + 1;
        }
        struct pollfd p = {fd, (short)(POLLOUT | (watch_input ? POLLIN : 0)), 0};
        int ready = poll(&p, 1, timeout);
        if (ready < 0) {
            if (errno == EINTR) { /* let Python run its signal handlers */
                res.state = LANE_FULL;
                return res;
            }
            res.error = errno;
            return res;
        }
        if (ready == 0) {
            res.state = LANE_FULL;
            return res;
        }
        if ((p.revents & POLLIN) || !(p.revents & POLLOUT)) {
            /* input to read, or an error or hang-up the reader will see */
            res.state = LANE_INPUT;
            return res;
        }
    }
    res.state = end == total ? LANE_DONE : LANE_FULL;
    return res;
}

/*
 * send_lane(fd, header, payload, start, stop, room, field_at, field_size,
 *           base, last_mask, markers, crc, phase, skip, limit, wait_ms,
 *           watch_input) -> (sent, total, end_phase, state)
 *
 * The run is frame_run's (same meaning, same checks); `phase` is the marker
 * phase of its first octet. Writes its wire octets from `skip` on (octets
 * taken by earlier calls) to the socket `fd` with non-blocking sendmsg, at
 * most `limit` of them (-1: no limit; 0 with fd -1 only measures). `fd` may
 * also be a writable buffer: the octets are copied to its start instead, as
 * many as it holds (within `limit`), for a transport that writes them. When the
 * socket is full it waits in poll without the GIL: `wait_ms` -1 until done,
 * 0 not at all, else at most that long; with `watch_input` it also returns
 * as soon as the socket is readable (the caller reads, then calls again).
 *
 * Returns the octets the kernel took in this call, the run's wire size, the
 * marker phase after it (as frame_run's with markers) and the state: 0 every
 * octet is out, 1 the socket is full (or the wait ran out, or a limit was
 * reached), 2 input arrived. A socket error raises OSError.
 */
static PyObject *py_send_lane(PyObject *self, PyObject *args)
{
    int fd = -1, markers, crc, watch_input, wait_ms;
    PyObject *sink;
    Py_buffer header, payload, out = {0};
    Py_ssize_t start, stop, room, field_at, field_size, skip, limit;
    unsigned long long base;
    int last_mask;
    unsigned phase;
    if (!PyArg_ParseTuple(args, "Oy*y*nnnnnKippInnip:send_lane", &sink, &header, &payload, &start,
                          &stop, &room, &field_at, &field_size, &base, &last_mask, &markers,
                          &crc, &phase, &skip, &limit, &wait_ms, &watch_input))
        return NULL;
    PyObject *result = NULL;
    struct iovec *iov = NULL;
    uint8_t *scratch = NULL;
    Py_ssize_t hlen = header.len;
    if (PyLong_Check(sink)) {
        /* Public API only (_PyLong_AsInt is gone from Python 3.13). */
        long value = PyLong_AsLong(sink);
        if (value == -1 && PyErr_Occurred())
            goto done;
        if (value < INT_MIN || value > INT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "send_lane: fd does not fit a C int");
            goto done;
        }
        fd = (int)value;
    } else {
        if (PyObject_GetBuffer(sink, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if (limit < 0 || limit > out.len)
            limit = out.len;
        /* The copy must not overlap what it reads (memcpy). */
        const uint8_t *o = out.buf, *oe = (const uint8_t *)out.buf + out.len;
        const uint8_t *p = payload.buf, *pe = (const uint8_t *)payload.buf + payload.len;
        const uint8_t *h = header.buf, *he = (const uint8_t *)header.buf + header.len;
        if ((o < pe && p < oe) || (o < he && h < oe)) {
            PyErr_SetString(PyExc_ValueError, "send_lane: the output overlaps the message");
            goto done;
        }
    }
    /* Each comparison without an addition that could wrap. */
    if (hlen > 32 || field_at < 0 || field_size < 1 || field_size > 8 || field_at > hlen ||
        field_size > hlen - field_at || room <= 0 || room > 0xFFFF - hlen || start < 0 ||
        stop < start || stop > payload.len || last_mask < 0 || last_mask > 0xFF ||
        (phase & 3) || phase > LANE_PHASE_MASK || skip < 0 || limit < -1 ||
        (fd < 0 && out.obj == NULL && limit != 0)) {
        PyErr_SetString(PyExc_ValueError, "send_lane: inconsistent arguments");
        goto done;
    }
    LaneRun r = {header.buf,
                 (size_t)hlen,
                 payload.buf,
                 (size_t)payload.len,
                 (size_t)start,
                 (size_t)stop,
                 (size_t)room,
                 (size_t)field_at,
                 (size_t)field_size,
                 base,
                 (uint8_t)last_mask,
                 markers,
                 crc};
    /* The run's wire size and the phase after it: sizes only. */
    size_t total = 0, offset = r.start;
    unsigned end_phase = phase;
    do {
        size_t n = seg_len(&r, offset);
        size_t w = fpdu_wire(r.hlen + n, end_phase, markers);
        total += w;
        end_phase = (unsigned)((end_phase + w) & LANE_PHASE_MASK);
        offset += n;
    } while (offset < r.stop);
    if ((size_t)skip > total) {
        PyErr_SetString(PyExc_ValueError, "send_lane: skip is past the run's end");
        goto done;
    }
    LaneResult res = {0, LANE_DONE, 0};
    size_t cap = limit < 0 ? SIZE_MAX : (size_t)limit;
    if ((size_t)skip < total && cap > 0) {
        iov = PyMem_RawMalloc(LANE_IOV * sizeof(struct iovec));
        scratch = PyMem_RawMalloc(LANE_SCRATCH);
        if (iov == NULL || scratch == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        res = lane_write(&r, phase, total, (size_t)skip, cap, fd, out.buf, wait_ms, watch_input,
                         iov, scratch);
        Py_END_ALLOW_THREADS
        if (res.error) {
            errno = res.error;
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
    } else if ((size_t)skip < total) {
        res.state = LANE_FULL;
    }
    result = Py_BuildValue("(nnIi)", (Py_ssize_t)res.sent, (Py_ssize_t)total,
                           markers ? end_phase : phase, res.state);
done:
    PyMem_RawFree(iov);
    PyMem_RawFree(scratch);
    if (out.obj != NULL)
        PyBuffer_Release(&out);
    PyBuffer_Release(&header);
    PyBuffer_Release(&payload);
    return result;
}

PyMethodDef iw_lane_methods[] = {
    {"send_lane", py_send_lane, METH_VARARGS,
     "send_lane(fd, header, payload, start, stop, room, field_at, field_size, base, "
     "last_mask, markers, crc, phase, skip, limit, wait_ms, watch_input) -> "
     "(sent, total, end_phase, state): a message's FPDUs written with sendmsg."},
    {NULL, NULL, 0, NULL},
};
