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
 * recv_lane(...)   a connection's receive ring filled from its socket and
 *                  walked FPDU by FPDU (RFC 5044 §4.1, §6, markers off),
 *                  each DDP segment (RFC 5041 §4.2, §4.3) copied into a
 *                  window the RDMAP core published, if it lies wholly
 *                  inside one; compact records of what was placed.
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

static PyObject *py_recv_lane(PyObject *self, PyObject *args);

PyMethodDef iw_lane_methods[] = {
    {"send_lane", py_send_lane, METH_VARARGS,
     "send_lane(fd, header, payload, start, stop, room, field_at, field_size, base, "
     "last_mask, markers, crc, phase, skip, limit, wait_ms, watch_input) -> "
     "(sent, total, end_phase, state): a message's FPDUs written with sendmsg."},
    {"recv_lane", py_recv_lane, METH_VARARGS,
     "recv_lane(fd, ring, start, end, wait_ms, crc, limit, version, tagged, write_ctl, writes, "
     "read_ctl, reads, send_ok, send_ctl, send_se_ctl, msn, received, sends, markers=False, "
     "phase=0, either=False) -> (start, end, done, state, records, need, took, got, phase): "
     "a ring's FPDUs checked and placed."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------------
 * The receive lane.
 *
 * recv_lane(...) reads a socket into the connection's ring until the socket
 * is empty or the ring is full (without the GIL), then walks the complete
 * FPDUs from `start` (RFC 5044 §4.1, markers off): ULPDU_Length against the
 * limit, CRC (§6), and places each DDP segment that lies wholly inside a
 * window the RDMAP core published (RFC 5041 §4.2, §4.3): an RDMA Write into
 * a registered buffer (by STag), a Read Response into the head Read's sink,
 * a plain Send (or Send with Solicited Event) into the posted receive
 * buffer of its MSN, in order. It stops at the first FPDU it is not sure of
 * and returns where, with compact records of what it placed; the cores
 * learn them and the Python path takes the rest.
 */

#define RL_TAGGED_HEADER 14u
#define RL_UNTAGGED_HEADER 18u
#define RL_TAGGED_FLAG 0x80u
#define RL_LAST_FLAG 0x40u
#define RL_VERSION_MASK 0x03u
#define RL_READ_WINDOWS 8
/* The largest FPDU: a 16-bit ULPDU_Length, PAD and CRC. */
#define RL_MIN_ROOM (0x10000u + 8u)

enum { RL_WRITE = 1, RL_READ = 2, RL_SEND = 3 };

static inline uint32_t rl_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t rl_be64(const uint8_t *p)
{
    return ((uint64_t)rl_be32(p) << 32) | rl_be32(p + 4);
}

/* A tagged window: octets at TO base .. base + len - 1 of a writable buffer. */
typedef struct {
    uint32_t stag;
    uint64_t base;
    Py_buffer view; /* view.obj NULL: not acquired */
    uint64_t len;
} RlWindow;

/* Get a writable buffer of `obj` into `view`; 0 on success. A failure
 * (a released view, a read-only one) is cleared: the lane is then not sure. */
static int rl_acquire(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static void rl_release(Py_buffer *view)
{
    if (view->obj != NULL)
        PyBuffer_Release(view);
    view->obj = NULL;
}

/* What recv reads into the ring, without the GIL. */
typedef struct {
    size_t got;
    int eof, full, error;
} RlRead;

static RlRead rl_read(int fd, uint8_t *ring, size_t end, size_t cap, int wait_ms)
{
    RlRead r = {0, 0, 0, 0};
    double deadline = wait_ms > 0 ? now_ms() + wait_ms : 0.0;
    while (end < cap) {
        ssize_t got = recv(fd, ring + end, cap - end, MSG_DONTWAIT);
        if (got > 0) {
            end += (size_t)got;
            r.got += (size_t)got;
            continue;
        }
        if (got == 0) {
            r.eof = 1;
            return r;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            r.error = errno;
            return r;
        }
        /* Empty: wait only when nothing arrived yet and the caller asked to. */
        if (r.got || wait_ms == 0)
            return r;
        int timeout = -1;
        if (wait_ms > 0) {
            double left = deadline - now_ms();
            if (left <= 0)
                return r;
            timeout = (int)left + 1;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int ready = poll(&p, 1, timeout);
        if (ready < 0) {
            if (errno == EINTR)
                return r; /* let Python run its signal handlers */
            r.error = errno;
            return r;
        }
        if (ready == 0)
            return r;
    }
    r.full = 1;
    return r;
}

/* Append one record (kind, a, b, c, d) to `records`; -1 on failure. */
static int rl_record(PyObject *records, int kind, unsigned long long a, unsigned long long b,
                     unsigned long long c, int d)
{
    PyObject *rec = Py_BuildValue("(iKKKi)", kind, a, b, c, d);
    if (rec == NULL)
        return -1;
    int rc = PyList_Append(records, rec);
    Py_DECREF(rec);
    return rc;
}

/* Where the FPDU that starts at `phase` (mod 512 from the marker origin)
 * puts its parts (RFC 5044 §4.1, §4.3): a leading marker when it starts on
 * a marker position, the content (ULPDU_Length, ULPDU, PAD, CRC) split by a
 * marker every 508 octets from `first` (content offset of the first one). */
typedef struct {
    size_t lead, first, count, wire;
} RlFrame;

static RlFrame rl_frame(size_t n, unsigned phase, int markers)
{
    RlFrame f = {0, SIZE_MAX, 0, 0};
    size_t content = 6 + n + ((4 - ((2 + n) & 3)) & 3);
    f.wire = content;
    if (markers) {
        f.lead = phase == 0 ? 4 : 0;
        f.first = LANE_MARKER_INTERVAL - ((phase + f.lead) & LANE_PHASE_MASK);
        if (f.first < content)
            f.count = (content - f.first + LANE_MARKER_STRIDE - 1) / LANE_MARKER_STRIDE;
        f.wire = f.lead + content + 4 * f.count;
    }
    return f;
}

/* Copy `len` content octets from content offset `c` of the FPDU whose
 * ULPDU_Length field is at `h` to `dst`, around the markers. */
static void rl_gather(const uint8_t *h, const RlFrame *f, size_t c, size_t len, uint8_t *dst)
{
    while (len) {
        size_t before = c < f->first ? 0 : (c - f->first) / LANE_MARKER_STRIDE + 1;
        size_t next = c < f->first ? f->first : f->first + before * LANE_MARKER_STRIDE;
        size_t piece = next - c < len ? next - c : len;
        memcpy(dst, h + c + 4 * before, piece);
        dst += piece;
        c += piece;
        len -= piece;
    }
}

/* The wire end of the complete FPDUs from `at` (their length fields only):
 * where the Python path's handover ends. A length above the limit: `end`
 * (that path reports it). */
static size_t rl_complete(const uint8_t *ring, size_t at, size_t end, size_t limit, int markers,
                          unsigned phase)
{
    for (;;) {
        size_t lead = markers && phase == 0 ? 4 : 0;
        if (end - at < lead + 2)
            break;
        size_t n = ((size_t)ring[at + lead] << 8) | ring[at + lead + 1];
        if (n > limit)
            return end;
        size_t wire = rl_frame(n, phase, markers).wire;
        if (wire > end - at)
            break;
        at += wire;
        phase = (unsigned)((phase + wire) & LANE_PHASE_MASK);
    }
    return at;
}

/*
 * recv_lane(fd, ring, start, end, wait_ms, crc, limit, version,
 *           tagged, write_ctl, writes, read_ctl, reads,
 *           send_ok, send_ctl, send_se_ctl, msn, received, sends,
 *           markers=False, phase=0, either=False)
 *   -> (start, end, done, state, records, need, took, got, phase)
 *
 * ring      the connection's ring (a writable buffer); data at [start, end).
 *           When less room than the largest FPDU is left after `end` (or
 *           nothing is held), the data moves to the front first; then the
 *           socket `fd` (-1: none) is read into the room after it until it
 *           is empty or the ring is full; `wait_ms` as send_lane's, for the
 *           first octet only.
 * tagged    the DDP tagged state: None (no tagged message in progress) or
 *           (stag, next_to, rdmap_ctl) of the unfinished one.
 * writes    {stag: (buffer, base_to)}: RDMA Write windows (the core made
 *           every check of the STag itself: valid, PD, REMOTE_WRITE).
 * reads     ((stag, buffer, base_to, filled), ...): the outstanding Reads'
 *           sinks in ORQ order, the head first; `filled` its octets placed.
 * write_ctl, read_ctl, send_ctl, send_se_ctl: the RDMAP control octets of
 *           RDMA Write, Read Response, Send, Send with Solicited Event
 *           (-1: none of that kind is placed).
 * markers   MPA markers (RFC 5044 §4.3) in the stream; `phase` is ring[start]'s
 *           position past a marker position (mod 512); every marker's
 *           FPDUPTR is checked (low two bits ignored; `either`: also the
 *           count to the FPDU's start, Rev 0 and culley-02 peers) and each
 *           header and payload is gathered around them.
 * send_ok   Sends may be placed: `sends` is the posted receive queue (items
 *           with a `view` buffer; one whose `guarded` is true is not placed
 *           into: its placements hold the RFC 7306 atomics' lock), the head's MSN `msn`, `received` octets
 *           of its message already placed.
 *
 * Returns the ring's new `start` (the first FPDU the lane did not take) and
 * `end`, `done` (the end of the complete FPDUs from `start`: the Python
 * path takes [start, done); `done` is `end` when a length field is above
 * the limit), state (bit 0: the peer closed, bit 1: the ring was filled,
 * bits 8 and up: the errno of a read that failed after some octets),
 * the records of what was placed, in order, `need`: an RDMA Write's
 * STag without a window at `start` (-1: none), `took`: the octets the lane
 * consumed (whole FPDUs, from the old `start` on) and `got`: the octets
 * read from the socket, and the marker phase at the new `start` (0 without
 * markers).
 *
 * Records: (1, stag, to, octets, last) a run of one RDMA Write's segments;
 * (2, index, to, octets, last) of the Read of `reads[index]`;
 * (3, index, end, solicited, last) a Send into `sends[index]` placed up to
 * MO `end` (last: its message is complete).
 */
static PyObject *py_recv_lane(PyObject *self, PyObject *args)
{
    int fd, wait_ms, crc, version, write_ctl, read_ctl, send_ok, send_ctl, send_se_ctl;
    int markers = 0, either = 0;
    unsigned phase = 0;
    Py_ssize_t start, end, limit;
    unsigned long msn_arg;
    Py_ssize_t received;
    PyObject *ring_obj, *tagged, *writes, *reads, *sends;
    if (!PyArg_ParseTuple(args, "iOnnipniOiOiO!piiknO|pIp:recv_lane", &fd, &ring_obj, &start,
                          &end, &wait_ms, &crc, &limit, &version, &tagged, &write_ctl, &writes,
                          &read_ctl, &PyTuple_Type, &reads, &send_ok, &send_ctl, &send_se_ctl,
                          &msn_arg, &received, &sends, &markers, &phase, &either))
        return NULL;
    Py_buffer ring;
    if (PyObject_GetBuffer(ring_obj, &ring, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *result = NULL, *records = NULL;
    RlWindow write_win = {0, 0, {0}, 0};
    int write_have = 0;
    RlWindow read_win[RL_READ_WINDOWS];
    memset(read_win, 0, sizeof read_win);
    Py_buffer send_buf = {0};
    Py_ssize_t send_index = -1;
    size_t cap = (size_t)ring.len;
    if (start < 0 || end < start || (size_t)end > cap || limit < 0 || limit > 0xFFFF ||
        version < 0 || version > 3 || write_ctl < -1 || write_ctl > 0xFF || read_ctl < -1 ||
        read_ctl > 0xFF || send_ctl < -1 || send_ctl > 0xFF || send_se_ctl < -1 ||
        send_se_ctl > 0xFF || msn_arg > 0xFFFFFFFFul || received < 0 || wait_ms < -1 ||
        (tagged != Py_None && !PyTuple_Check(tagged)) || !PyDict_Check(writes) ||
        (phase & 3) || phase > LANE_PHASE_MASK) {
        PyErr_SetString(PyExc_ValueError, "recv_lane: inconsistent arguments");
        goto done;
    }
    Py_ssize_t nreads = PyTuple_GET_SIZE(reads);
    if (nreads > RL_READ_WINDOWS)
        nreads = RL_READ_WINDOWS;
    /* The unfinished tagged message, if any. */
    int open = 0;
    uint32_t open_stag = 0;
    uint64_t open_to = 0;
    int open_ctl = 0;
    if (tagged != Py_None) {
        unsigned long s;
        unsigned long long t;
        if (!PyArg_ParseTuple(tagged, "kKi:recv_lane tagged", &s, &t, &open_ctl))
            goto done;
        if (s > 0xFFFFFFFFul) {
            PyErr_SetString(PyExc_ValueError, "recv_lane: inconsistent arguments");
            goto done;
        }
        open = 1;
        open_stag = (uint32_t)s;
        open_to = t;
    }
    uint8_t *buf = ring.buf;
    size_t s0 = (size_t)start, e0 = (size_t)end;
    /* Room for the largest FPDU after the data, else the data moves to the
     * front (a partial FPDU, mostly: moved only once in a while). */
    if (s0 > 0 && (cap - e0 < RL_MIN_ROOM || s0 == e0)) {
        memmove(buf, buf + s0, e0 - s0);
        e0 -= s0;
        s0 = 0;
    }
    int state = 0;
    size_t got = 0;
    if (fd >= 0 && e0 < cap) {
        RlRead r;
        Py_BEGIN_ALLOW_THREADS
        r = rl_read(fd, buf, e0, cap, wait_ms);
        Py_END_ALLOW_THREADS
        if (r.error && r.got == 0) {
            errno = r.error;
            PyErr_SetFromErrno(PyExc_OSError);
            goto done;
        }
        /* An error after some octets: they are processed first, the
         * error comes back in the state (the kernel reports it once). */
        e0 += r.got;
        got = r.got;
        state = (r.eof ? 1 : 0) | (r.full ? 2 : 0) | (r.error << 8);
    } else if (e0 >= cap) {
        state = 2;
    }
    records = PyList_New(0);
    if (records == NULL)
        goto done;
    /* Per-call progress of the records being built. */
    int run_kind = 0;          /* RL_WRITE / RL_READ of the open record */
    uint32_t run_stag = 0;
    uint64_t run_to = 0, run_octets = 0;
    Py_ssize_t read_index = 0; /* reads[] entry of the head Read */
    uint64_t read_filled = 0;
    if (nreads > 0) {
        PyObject *w = PyTuple_GET_ITEM(reads, 0);
        unsigned long long f;
        unsigned long s;
        PyObject *obj;
        unsigned long long b;
        if (!PyArg_ParseTuple(w, "kOKK:recv_lane reads", &s, &obj, &b, &f))
            goto done;
        read_filled = f;
    }
    uint32_t msn = (uint32_t)msn_arg;
    uint64_t mo = (uint64_t)received;
    Py_ssize_t send_at = 0; /* sends[] entry of the next Send message */
    long long need = -1;
    size_t at = s0;
    size_t lim = (size_t)limit;
    for (;;) {
        size_t lead = markers && phase == 0 ? 4 : 0;
        if (e0 - at < lead + 2)
            break;
        const uint8_t *h = buf + at + lead; /* the ULPDU_Length field */
        size_t n = ((size_t)h[0] << 8) | h[1];
        if (n > lim)
            break; /* the Python path reports it */
        RlFrame frame = rl_frame(n, phase, markers);
        size_t wire = frame.wire;
        if (wire > e0 - at)
            break;
        if (crc) {
            uint32_t computed = ~iw_crc32c(0xFFFFFFFFu, buf + at, wire - 4);
            const uint8_t *f = buf + at + wire - 4;
            uint32_t field = (uint32_t)f[0] | ((uint32_t)f[1] << 8) | ((uint32_t)f[2] << 16) |
                             ((uint32_t)f[3] << 24);
            if (field != computed)
                break;
        }
        /* RFC 5044 §4.3: the markers' FPDUPTRs (low two bits ignored), as
         * the usual path checks them (and reports them when wrong). */
        if (lead && (((unsigned)buf[at + 2] << 8 | buf[at + 3]) & 0xFFFCu))
            break;
        int marked = 1;
        for (size_t k = 0; k < frame.count; k++) {
            size_t m = frame.first + LANE_MARKER_INTERVAL * k; /* from `h` */
            size_t found = ((size_t)h[m + 2] << 8 | h[m + 3]) & 0xFFFCu;
            if (found != m && !(either && lead && found == m + lead)) {
                marked = 0;
                break;
            }
        }
        if (!marked)
            break;
        /* The DDP/RDMAP header, gathered around markers. */
        uint8_t u[RL_UNTAGGED_HEADER] = {0};
        rl_gather(h, &frame, 2, n < sizeof u ? n : sizeof u, u);
        if (n < 2 || (u[0] & RL_VERSION_MASK) != (unsigned)version)
            break;
        int last = (u[0] & RL_LAST_FLAG) != 0;
        if (u[0] & RL_TAGGED_FLAG) {
            if (n <= RL_TAGGED_HEADER)
                break; /* zero-length segments: the Python path */
            int ctl = u[1];
            uint32_t stag = rl_be32(u + 2);
            uint64_t to = rl_be64(u + 6);
            uint64_t len = n - RL_TAGGED_HEADER;
            if (open && (stag != open_stag || to != open_to || ctl != open_ctl))
                break;
            RlWindow *win;
            int kind;
            if (ctl == write_ctl) {
                kind = RL_WRITE;
                if (!write_have || write_win.stag != stag) {
                    rl_release(&write_win.view);
                    write_have = 0;
                    PyObject *key = PyLong_FromUnsignedLong(stag);
                    if (key == NULL)
                        goto done;
                    PyObject *entry = PyDict_GetItemWithError(writes, key);
                    Py_DECREF(key);
                    if (entry == NULL) {
                        if (PyErr_Occurred())
                            goto done;
                        need = stag;
                        break;
                    }
                    PyObject *obj;
                    unsigned long long b;
                    if (!PyTuple_Check(entry) || !PyArg_ParseTuple(entry, "OK", &obj, &b)) {
                        PyErr_Clear();
                        break;
                    }
                    if (rl_acquire(obj, &write_win.view) < 0)
                        break;
                    write_win.stag = stag;
                    write_win.base = b;
                    write_win.len = (uint64_t)write_win.view.len;
                    write_have = 1;
                }
                win = &write_win;
            } else if (ctl == read_ctl) {
                kind = RL_READ;
                if (read_index >= nreads)
                    break;
                win = &read_win[read_index];
                if (win->view.obj == NULL) {
                    unsigned long s;
                    PyObject *obj;
                    unsigned long long b, f;
                    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(reads, read_index), "kOKK", &s, &obj,
                                          &b, &f)) {
                        PyErr_Clear();
                        break;
                    }
                    if (rl_acquire(obj, &win->view) < 0)
                        break;
                    win->stag = (uint32_t)s;
                    win->base = b;
                    win->len = (uint64_t)win->view.len;
                    read_filled = f;
                }
                /* In order only: the next octet of the sink. */
                if (stag != win->stag || read_filled > win->len || to - win->base != read_filled ||
                    to < win->base || len > win->len - read_filled)
                    break;
                if (last && len != win->len - read_filled)
                    break;
            } else {
                break;
            }
            /* Wholly inside the window, compared without an addition. */
            if (to < win->base || to - win->base > win->len || len > win->len - (to - win->base))
                break;
            uint8_t *dst = (uint8_t *)win->view.buf + (to - win->base);
            rl_gather(h, &frame, 2 + RL_TAGGED_HEADER, (size_t)len, dst);
            if (run_kind == kind && run_stag == stag && run_to + run_octets == to) {
                run_octets += len;
            } else {
                if (run_kind && rl_record(records, run_kind,
                                          run_kind == RL_WRITE ? run_stag : (uint64_t)read_index,
                                          run_to, run_octets, 0) < 0)
                    goto done;
                run_kind = kind;
                run_stag = stag;
                run_to = to;
                run_octets = len;
            }
            if (kind == RL_READ)
                read_filled += len;
            if (last) {
                if (rl_record(records, kind, kind == RL_WRITE ? stag : (uint64_t)read_index,
                              run_to, run_octets, 1) < 0)
                    goto done;
                run_kind = 0;
                open = 0;
                if (kind == RL_READ) {
                    read_index++;
                    read_filled = 0;
                }
            } else {
                open = 1;
                open_stag = stag;
                open_to = to + len;
                open_ctl = ctl;
            }
        } else {
            /* An untagged segment: a plain Send into its posted buffer. */
            if (!send_ok || n < RL_UNTAGGED_HEADER)
                break;
            int ctl = u[1];
            if (ctl != send_ctl && ctl != send_se_ctl)
                break;
            uint32_t qn = rl_be32(u + 6), smsn = rl_be32(u + 10);
            uint64_t smo = rl_be32(u + 14);
            if (qn != 0 || smsn != msn || smo != mo)
                break;
            if (send_index != send_at) {
                rl_release(&send_buf);
                send_index = -1;
                if (send_at >= PySequence_Size(sends)) {
                    PyErr_Clear();
                    break;
                }
                PyObject *item = PySequence_GetItem(sends, send_at);
                if (item == NULL) {
                    PyErr_Clear();
                    break;
                }
                /* A buffer whose placements hold the RFC 7306 Atomic
                 * Operations' lock (`guarded`): the usual path's. */
                PyObject *guarded = PyObject_GetAttrString(item, "guarded");
                int locked = guarded != NULL ? PyObject_IsTrue(guarded) : 0;
                Py_XDECREF(guarded);
                PyErr_Clear();
                PyObject *v = locked ? NULL : PyObject_GetAttrString(item, "view");
                Py_DECREF(item);
                if (v == NULL) {
                    PyErr_Clear();
                    break;
                }
                int bad = rl_acquire(v, &send_buf);
                Py_DECREF(v);
                if (bad < 0)
                    break;
                send_index = send_at;
            }
            uint64_t len = n - RL_UNTAGGED_HEADER;
            if (mo > (uint64_t)send_buf.len || len > (uint64_t)send_buf.len - mo)
                break; /* too long: the Python path reports it */
            if (len)
                rl_gather(h, &frame, 2 + RL_UNTAGGED_HEADER, (size_t)len,
                          (uint8_t *)send_buf.buf + mo);
            /* A Send between tagged segments ends the current record. */
            if (run_kind && rl_record(records, run_kind,
                                      run_kind == RL_WRITE ? run_stag : (uint64_t)read_index,
                                      run_to, run_octets, 0) < 0)
                goto done;
            run_kind = 0;
            mo += len;
            if (last) {
                if (rl_record(records, RL_SEND, (uint64_t)send_at, mo, ctl == send_se_ctl, 1) < 0)
                    goto done;
                send_at++;
                msn++;
                mo = 0;
            }
        }
        at += wire;
        phase = (unsigned)((phase + wire) & LANE_PHASE_MASK);
    }
    if (run_kind && rl_record(records, run_kind,
                              run_kind == RL_WRITE ? run_stag : (uint64_t)read_index, run_to,
                              run_octets, 0) < 0)
        goto done;
    if (mo != (uint64_t)received || send_at > 0) {
        /* A Send message in progress at the end: where it stands. */
        if (mo && rl_record(records, RL_SEND, (uint64_t)send_at, mo, 0, 0) < 0)
            goto done;
    }
    size_t complete = rl_complete(buf, at, e0, lim, markers, phase);
    result = Py_BuildValue("(nnniOLnnI)", (Py_ssize_t)at, (Py_ssize_t)e0, (Py_ssize_t)complete,
                           state, records, need, (Py_ssize_t)(at - s0), (Py_ssize_t)got,
                           markers ? phase : 0u);
done:
    rl_release(&write_win.view);
    for (int k = 0; k < RL_READ_WINDOWS; k++)
        rl_release(&read_win[k].view);
    rl_release(&send_buf);
    Py_XDECREF(records);
    PyBuffer_Release(&ring);
    return result;
}
