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
 *                  buffer (no copy of it here); or, `contiguous`, every
 *                  octet framed into one buffer of up to 64 KiB, the
 *                  payload copied once and each FPDU's CRC taken over its
 *                  framed octets right after (small FPDUs and markers: one
 *                  iovec per batch, not two or more per FPDU). Resumable:
 *                  the caller keeps
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
#include "_wire.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

/* iovecs per sendmsg (Linux IOV_MAX is 1024) and scratch octets per batch */
#define LANE_IOV 1024
#define LANE_SCRATCH (64 * 1024)
/* A contiguous batch: FPDUs are added while the batch stays within
 * LANE_BATCH; the first always goes in, so the scratch also holds one FPDU
 * of the largest size (with its markers) beyond it. 64 KiB: as many
 * system calls per MiB as the framing path's 64 KiB runs, and the batch
 * stays in the L2 cache between our copy and the kernel's. */
#define LANE_BATCH (64 * 1024)
#define LANE_COPY_SCRATCH (LANE_BATCH + IW_FPDU_MAX + 1024)

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

/* Segments in the run: an empty run is one empty segment. */
static size_t lane_count(const LaneRun *r)
{
    size_t len = r->stop - r->start;
    size_t count = len / r->room + (len % r->room != 0);
    return count ? count : 1;
}

/* The run's wire size, and the marker phase after it (from `phase`).
 * Without markers an FPDU's size does not depend on where it starts and
 * every segment but the last has `room` octets: arithmetic, not a walk
 * (a walk is some 730 FPDUs per MiB at MTU 1500, on every call). */
static size_t lane_size(const LaneRun *r, unsigned phase, unsigned *end_phase)
{
    size_t total = 0, offset = r->start;
    if (!r->markers) {
        size_t last = lane_count(r) - 1; /* (last * room <= stop - start) */
        total = last * iw_content(r->hlen + r->room) +
                iw_content(r->hlen + seg_len(r, r->start + last * r->room));
        *end_phase = (unsigned)((phase + total) & IW_PHASE_MASK);
        return total;
    }
    do {
        size_t n = seg_len(r, offset);
        size_t w = iw_frame(r->hlen + n, phase, r->markers).wire;
        total += w;
        phase = (unsigned)((phase + w) & IW_PHASE_MASK);
        offset += n;
    } while (offset < r->stop);
    *end_phase = phase;
    return total;
}

/* The FPDU holding wire octet `skip` (the last one from its end on): its
 * segment's offset, its first wire octet and the phase there. */
static void lane_seek(const LaneRun *r, unsigned phase0, size_t skip, size_t *offset,
                      size_t *wpos, unsigned *phase)
{
    if (!r->markers) {
        size_t w = iw_content(r->hlen + r->room), last = lane_count(r) - 1;
        size_t index = skip / w < last ? skip / w : last;
        *offset = r->start + index * r->room;
        *wpos = index * w;
        *phase = (unsigned)((phase0 + *wpos) & IW_PHASE_MASK);
        return;
    }
    size_t at = r->start, wp = 0;
    unsigned ph = phase0;
    for (;;) {
        size_t n = seg_len(r, at);
        size_t w = iw_frame(r->hlen + n, ph, r->markers).wire;
        if (wp + w > skip || at + n >= r->stop)
            break;
        wp += w;
        ph = (unsigned)((ph + w) & IW_PHASE_MASK);
        at += n;
    }
    *offset = at;
    *wpos = wp;
    *phase = ph;
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
    int copy;          /* contiguous: the payload is copied into scratch too,
                          and the CRC taken over the framed FPDU at its end */
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
    uint8_t m[IW_MARKER_SIZE];
    iw_put_marker(m, ptr);
    emit_scratch(b, m, IW_MARKER_SIZE);
    if (do_crc && !b->copy)
        b->crc = iw_crc32c(b->crc, m, IW_MARKER_SIZE);
    b->bytes += IW_MARKER_SIZE;
    b->phase = (b->phase + IW_MARKER_SIZE) & IW_PHASE_MASK;
    b->since_len += IW_MARKER_SIZE;
}

/* n octets of FPDU content, a marker before every one at phase 0. */
static void emit(Batch *b, const LaneRun *r, const uint8_t *src, size_t n, int user)
{
    while (n) {
        if (r->markers && b->phase == 0)
            emit_marker(b, r->crc, (unsigned)b->since_len);
        size_t k = r->markers ? IW_MARKER_INTERVAL - b->phase : n;
        if (k > n)
            k = n;
        if (user && !b->copy)
            emit_user(b, src, k);
        else
            emit_scratch(b, src, k);
        if (r->crc && !b->copy)
            b->crc = iw_crc32c(b->crc, src, k);
        b->bytes += k;
        b->since_len += k;
        b->phase = (unsigned)((b->phase + k) & IW_PHASE_MASK);
        src += k;
        n -= k;
    }
}

/* Whether an FPDU of `wire` octets still fits the batch (worst case). */
static int batch_fits(const Batch *b, size_t wire)
{
    size_t markers = wire / IW_MARKER_STRIDE + 3;
    if (b->copy) /* (wire is at most one FPDU's: no wrap) */
        return b->used <= LANE_BATCH && wire + 48 + 4 * markers <= LANE_BATCH - b->used;
    return (size_t)b->niov + 2 * markers + 6 <= LANE_IOV &&
           b->used + 48 + 4 * markers <= LANE_SCRATCH;
}

/* The FPDU of the segment at `offset`, starting at the batch's phase. */
static void emit_fpdu(Batch *b, const LaneRun *r, size_t offset)
{
    static const uint8_t zeros[4] = {0, 0, 0, 0};
    size_t n = seg_len(r, offset);
    size_t ulpdu = r->hlen + n;
    size_t begin = b->used; /* where the FPDU starts in a contiguous batch */
    b->crc = 0xFFFFFFFFu;
    b->since_len = 0;
    if (r->markers && b->phase == 0) /* RFC 5044 §4.3: FPDUPTR 0, CRC'd with this FPDU */
        emit_marker(b, r->crc, 0);
    b->since_len = 0;
    uint8_t head[IW_LENGTH_SIZE + 32];
    iw_put_be16(head, (uint32_t)ulpdu);
    memcpy(head + IW_LENGTH_SIZE, r->header, r->hlen);
    iw_put_be(head + IW_LENGTH_SIZE + r->field_at, r->field_size, r->base + (uint64_t)offset);
    if (offset + n == r->plen)
        head[IW_LENGTH_SIZE] |= r->last_mask;
    emit(b, r, head, IW_LENGTH_SIZE + r->hlen, 0);
    emit(b, r, r->payload + offset, n, 1);
    emit(b, r, zeros, iw_pad(ulpdu), 0);
    if (r->markers && b->phase == 0) /* a marker right before the CRC */
        emit_marker(b, r->crc, (unsigned)b->since_len);
    if (b->copy && r->crc) /* every octet before the CRC, while in L1 */
        b->crc = iw_crc32c(0xFFFFFFFFu, b->scratch + begin, b->used - begin);
    uint8_t tail[IW_CRC_SIZE];
    iw_put_le32(tail, r->crc ? ~b->crc : 0);
    emit_scratch(b, tail, IW_CRC_SIZE);
    b->bytes += IW_CRC_SIZE;
    b->phase = (b->phase + IW_CRC_SIZE) & IW_PHASE_MASK;
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

/* Where a lane writes and how it waits (send_lane's arguments), and the
 * memory it builds a batch in. */
typedef struct {
    int fd;           /* the socket, when copy_to is NULL */
    uint8_t *copy_to; /* else the octets are copied here */
    int wait_ms;      /* for room: -1 until done, 0 not at all, else at most */
    int watch_input;  /* a wait also ends when the socket is readable */
    int contiguous;   /* frame into scratch (LANE_COPY_SCRATCH octets) */
    struct iovec *iov;
    uint8_t *scratch;
} LaneIo;

/*
 * Write the run's wire octets [skip, min(total, skip + limit)) to io->fd.
 * Runs without the GIL: touches only the run's buffers and its own memory.
 */
static LaneResult lane_write(const LaneRun *r, unsigned phase0, size_t total, size_t skip,
                             size_t limit, const LaneIo *io)
{
    int fd = io->fd, wait_ms = io->wait_ms, watch_input = io->watch_input;
    uint8_t *copy_to = io->copy_to;
    LaneResult res = {0, LANE_DONE, 0};
    size_t end = total - skip > limit ? skip + limit : total;
    double deadline = wait_ms > 0 ? now_ms() + wait_ms : 0.0;
    /* Find the FPDU holding octet `skip`: sizes only, no CRC. */
    size_t offset, wpos;
    unsigned phase;
    lane_seek(r, phase0, skip, &offset, &wpos, &phase);
    size_t pos = skip;
    Batch b = {io->iov, 0, io->scratch, 0, 0, phase, 0, 0, io->contiguous};
    while (pos < end) {
        if (b.niov == 0) {
            /* Build the next batch from the FPDU at `offset` (wire `wpos`). */
            b.used = 0;
            b.bytes = 0;
            size_t first = wpos;
            for (;;) {
                size_t n = seg_len(r, offset);
                size_t w = iw_frame(r->hlen + n, b.phase, r->markers).wire;
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
 *           watch_input, contiguous=False) -> (sent, total, end_phase, state)
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
 * `contiguous` frames every octet into one buffer per batch (the payload
 * copied) instead of pointing iovecs into the payload: the same octets.
 *
 * Returns the octets the kernel took in this call, the run's wire size, the
 * marker phase after it (as frame_run's with markers) and the state: 0 every
 * octet is out, 1 the socket is full (or the wait ran out, or a limit was
 * reached), 2 input arrived. A socket error raises OSError.
 */
static PyObject *py_send_lane(PyObject *self, PyObject *args)
{
    int fd = -1, markers, crc, watch_input, wait_ms, contiguous = 0;
    PyObject *sink;
    Py_buffer header, payload, out = {0};
    Py_ssize_t start, stop, room, field_at, field_size, skip, limit;
    unsigned long long base;
    int last_mask;
    unsigned phase;
    if (!PyArg_ParseTuple(args, "Oy*y*nnnnnKippInnip|p:send_lane", &sink, &header, &payload,
                          &start, &stop, &room, &field_at, &field_size, &base, &last_mask,
                          &markers, &crc, &phase, &skip, &limit, &wait_ms, &watch_input,
                          &contiguous))
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
        (phase & 3) || phase > IW_PHASE_MASK || skip < 0 || limit < -1 ||
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
    unsigned end_phase;
    size_t total = lane_size(&r, phase, &end_phase);
    if ((size_t)skip > total) {
        PyErr_SetString(PyExc_ValueError, "send_lane: skip is past the run's end");
        goto done;
    }
    LaneResult res = {0, LANE_DONE, 0};
    size_t cap = limit < 0 ? SIZE_MAX : (size_t)limit;
    if ((size_t)skip < total && cap > 0) {
        iov = PyMem_RawMalloc(LANE_IOV * sizeof(struct iovec));
        scratch = PyMem_RawMalloc(contiguous ? LANE_COPY_SCRATCH : LANE_SCRATCH);
        if (iov == NULL || scratch == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        LaneIo io = {fd, out.buf, wait_ms, watch_input, contiguous, iov, scratch};
        res = lane_write(&r, phase, total, (size_t)skip, cap, &io);
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
     "last_mask, markers, crc, phase, skip, limit, wait_ms, watch_input, contiguous=False) -> "
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

#define RL_READ_WINDOWS 8

enum { RL_WRITE = 1, RL_READ = 2, RL_SEND = 3 };

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

/* The wire end of the complete FPDUs from `at` (their length fields only):
 * where the Python path's handover ends. A length above the limit: `end`
 * (that path reports it). */
static size_t rl_complete(const uint8_t *ring, size_t at, size_t end, size_t limit, int markers,
                          unsigned phase)
{
    for (;;) {
        size_t lead = markers && phase == 0 ? IW_MARKER_SIZE : 0;
        if (end - at < lead + IW_LENGTH_SIZE)
            break;
        size_t n = iw_be16(ring + at + lead);
        if (n > limit)
            return end;
        size_t wire = iw_frame(n, phase, markers).wire;
        if (wire > end - at)
            break;
        at += wire;
        phase = (unsigned)((phase + wire) & IW_PHASE_MASK);
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
/* recv_lane's arguments, as parsed (see above for their meaning). */
typedef struct {
    int fd, wait_ms, crc, version, markers, either;
    int write_ctl, read_ctl, send_ok, send_ctl, send_se_ctl;
    Py_ssize_t start, end, limit, received;
    unsigned long msn;
    unsigned phase;
    PyObject *ring, *tagged, *writes, *reads, *sends;
} RlArgs;

static int rl_parse(PyObject *args, RlArgs *a)
{
    a->markers = 0;
    a->either = 0;
    a->phase = 0;
    if (!PyArg_ParseTuple(args, "iOnnipniOiOiO!piiknO|pIp:recv_lane", &a->fd, &a->ring, &a->start,
                          &a->end, &a->wait_ms, &a->crc, &a->limit, &a->version, &a->tagged,
                          &a->write_ctl, &a->writes, &a->read_ctl, &PyTuple_Type, &a->reads,
                          &a->send_ok, &a->send_ctl, &a->send_se_ctl, &a->msn, &a->received,
                          &a->sends, &a->markers, &a->phase, &a->either))
        return 0;
    return 1;
}

/* An RDMAP control octet argument: -1 (none) or an octet. */
static inline int rl_ctl_ok(int ctl) { return ctl >= -1 && ctl <= 0xFF; }

static int rl_args_ok(const RlArgs *a, size_t cap)
{
    return a->start >= 0 && a->end >= a->start && (size_t)a->end <= cap && a->limit >= 0 &&
           a->limit <= (Py_ssize_t)IW_MAX_ULPDU && a->version >= 0 && a->version <= 3 &&
           rl_ctl_ok(a->write_ctl) && rl_ctl_ok(a->read_ctl) && rl_ctl_ok(a->send_ctl) &&
           rl_ctl_ok(a->send_se_ctl) && a->msn <= 0xFFFFFFFFul && a->received >= 0 &&
           a->wait_ms >= -1 && (a->tagged == Py_None || PyTuple_Check(a->tagged)) &&
           PyDict_Check(a->writes) && !(a->phase & 3) && a->phase <= IW_PHASE_MASK;
}

/* The state of one walk: the windows acquired, the tagged message and the
 * Send message in progress, and the record being built. */
typedef struct {
    const RlArgs *a;
    RlWindow write_win; /* write_win.view.obj NULL: none acquired */
    RlWindow read_win[RL_READ_WINDOWS];
    Py_ssize_t nreads;
    Py_buffer send_buf;
    Py_ssize_t send_index; /* sends[] entry send_buf holds, -1: none */
    /* the unfinished tagged message */
    int open;
    uint32_t open_stag;
    uint64_t open_to;
    int open_ctl;
    /* the record being built: RL_WRITE / RL_READ, 0: none */
    int run_kind;
    uint32_t run_stag;
    uint64_t run_to, run_octets;
    Py_ssize_t read_index; /* reads[] entry of the head Read */
    uint64_t read_filled;
    uint32_t msn;
    uint64_t mo;
    Py_ssize_t send_at; /* sends[] entry of the next Send message */
    long long need;
    PyObject *records;
} RlWalk;

/* How one segment went: placed, or the walk stops there (the Python path
 * takes it), or a Python error is set. */
enum { RL_FAIL = -1, RL_STOP = 0, RL_PLACED = 1 };

static void rl_walk_release(RlWalk *w)
{
    rl_release(&w->write_win.view);
    for (int k = 0; k < RL_READ_WINDOWS; k++)
        rl_release(&w->read_win[k].view);
    rl_release(&w->send_buf);
    Py_CLEAR(w->records);
}

/* The walk's starting state from the arguments; 0 with an error set. */
static int rl_walk_init(RlWalk *w, const RlArgs *a)
{
    memset(w, 0, sizeof *w);
    w->a = a;
    w->send_index = -1;
    w->need = -1;
    w->msn = (uint32_t)a->msn;
    w->mo = (uint64_t)a->received;
    w->nreads = PyTuple_GET_SIZE(a->reads);
    if (w->nreads > RL_READ_WINDOWS)
        w->nreads = RL_READ_WINDOWS;
    if (a->tagged != Py_None) {
        unsigned long s;
        unsigned long long t;
        if (!PyArg_ParseTuple(a->tagged, "kKi:recv_lane tagged", &s, &t, &w->open_ctl))
            return 0;
        if (s > 0xFFFFFFFFul) {
            PyErr_SetString(PyExc_ValueError, "recv_lane: inconsistent arguments");
            return 0;
        }
        w->open = 1;
        w->open_stag = (uint32_t)s;
        w->open_to = t;
    }
    if (w->nreads > 0) {
        unsigned long s;
        PyObject *obj;
        unsigned long long b, f;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(a->reads, 0), "kOKK:recv_lane reads", &s, &obj, &b,
                              &f))
            return 0;
        w->read_filled = f;
    }
    return (w->records = PyList_New(0)) != NULL;
}

/* Close the record being built, if any (not the message's last). */
static int rl_end_run(RlWalk *w)
{
    int kind = w->run_kind;
    w->run_kind = 0;
    if (!kind)
        return 0;
    return rl_record(w->records, kind, kind == RL_WRITE ? w->run_stag : (uint64_t)w->read_index,
                     w->run_to, w->run_octets, 0);
}

/* The window of RDMA Writes to `stag`; NULL: the walk stops (`need` set
 * when the core has not published one). */
static RlWindow *rl_write_window(RlWalk *w, uint32_t stag, int *failed)
{
    RlWindow *win = &w->write_win;
    if (win->view.obj != NULL && win->stag == stag)
        return win;
    rl_release(&win->view);
    PyObject *key = PyLong_FromUnsignedLong(stag);
    if (key == NULL) {
        *failed = 1;
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(w->a->writes, key);
    Py_DECREF(key);
    if (entry == NULL) {
        if (PyErr_Occurred())
            *failed = 1;
        else
            w->need = stag;
        return NULL;
    }
    PyObject *obj;
    unsigned long long base;
    if (!PyTuple_Check(entry) || !PyArg_ParseTuple(entry, "OK", &obj, &base)) {
        PyErr_Clear();
        return NULL;
    }
    if (rl_acquire(obj, &win->view) < 0)
        return NULL;
    win->stag = stag;
    win->base = base;
    win->len = (uint64_t)win->view.len;
    return win;
}

/* The head Read's sink, if a Read Response segment (`stag`, `to`, `len`
 * octets, `last`) continues it in order; NULL otherwise. */
static RlWindow *rl_read_window(RlWalk *w, uint32_t stag, uint64_t to, uint64_t len, int last)
{
    if (w->read_index >= w->nreads)
        return NULL;
    RlWindow *win = &w->read_win[w->read_index];
    if (win->view.obj == NULL) {
        unsigned long s;
        PyObject *obj;
        unsigned long long b, f;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(w->a->reads, w->read_index), "kOKK", &s, &obj, &b,
                              &f)) {
            PyErr_Clear();
            return NULL;
        }
        if (rl_acquire(obj, &win->view) < 0)
            return NULL;
        win->stag = (uint32_t)s;
        win->base = b;
        win->len = (uint64_t)win->view.len;
        w->read_filled = f;
    }
    /* In order only: the next octet of the sink. */
    if (stag != win->stag || w->read_filled > win->len || to < win->base ||
        to - win->base != w->read_filled || len > win->len - w->read_filled)
        return NULL;
    if (last && len != win->len - w->read_filled)
        return NULL;
    return win;
}

/* A tagged segment (RFC 5041 §4.2): an RDMA Write or Read Response placed
 * into its window. `u` holds the header, `h` the FPDU's ULPDU_Length. */
static int rl_tagged(RlWalk *w, const uint8_t *h, const IwFrame *f, size_t n, const uint8_t *u)
{
    const RlArgs *a = w->a;
    if (n <= IW_TAGGED_HEADER)
        return RL_STOP; /* zero-length segments: the Python path */
    int last = (u[0] & IW_DDP_LAST_FLAG) != 0;
    int ctl = u[1];
    uint32_t stag = iw_be32(u + IW_TAGGED_STAG_AT);
    uint64_t to = iw_be64(u + IW_TAGGED_TO_AT);
    uint64_t len = n - IW_TAGGED_HEADER;
    if (w->open && (stag != w->open_stag || to != w->open_to || ctl != w->open_ctl))
        return RL_STOP;
    RlWindow *win;
    int kind, failed = 0;
    if (ctl == a->write_ctl) {
        kind = RL_WRITE;
        win = rl_write_window(w, stag, &failed);
    } else if (ctl == a->read_ctl) {
        kind = RL_READ;
        win = rl_read_window(w, stag, to, len, last);
    } else {
        return RL_STOP;
    }
    if (win == NULL)
        return failed ? RL_FAIL : RL_STOP;
    /* Wholly inside the window, compared without an addition. */
    if (to < win->base || to - win->base > win->len || len > win->len - (to - win->base))
        return RL_STOP;
    iw_gather(h, f, IW_LENGTH_SIZE + IW_TAGGED_HEADER, (size_t)len,
              (uint8_t *)win->view.buf + (to - win->base));
    if (w->run_kind == kind && w->run_stag == stag && w->run_to + w->run_octets == to) {
        w->run_octets += len;
    } else {
        if (rl_end_run(w) < 0)
            return RL_FAIL;
        w->run_kind = kind;
        w->run_stag = stag;
        w->run_to = to;
        w->run_octets = len;
    }
    if (kind == RL_READ)
        w->read_filled += len;
    if (!last) {
        w->open = 1;
        w->open_stag = stag;
        w->open_to = to + len;
        w->open_ctl = ctl;
        return RL_PLACED;
    }
    uint64_t which = kind == RL_WRITE ? stag : (uint64_t)w->read_index;
    if (rl_record(w->records, kind, which, w->run_to, w->run_octets, 1) < 0)
        return RL_FAIL;
    w->run_kind = 0;
    w->open = 0;
    if (kind == RL_READ) {
        w->read_index++;
        w->read_filled = 0;
    }
    return RL_PLACED;
}

/* The posted buffer of the next Send message, acquired into send_buf; 0:
 * none the lane may place into. */
static int rl_send_buffer(RlWalk *w)
{
    if (w->send_index == w->send_at)
        return 1;
    rl_release(&w->send_buf);
    w->send_index = -1;
    if (w->send_at >= PySequence_Size(w->a->sends)) {
        PyErr_Clear();
        return 0;
    }
    PyObject *item = PySequence_GetItem(w->a->sends, w->send_at);
    if (item == NULL) {
        PyErr_Clear();
        return 0;
    }
    /* A buffer whose placements hold the RFC 7306 Atomic Operations' lock
     * (`guarded`): the usual path's. */
    PyObject *guarded = PyObject_GetAttrString(item, "guarded");
    int locked = guarded != NULL ? PyObject_IsTrue(guarded) : 0;
    Py_XDECREF(guarded);
    PyErr_Clear();
    PyObject *v = locked ? NULL : PyObject_GetAttrString(item, "view");
    Py_DECREF(item);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    int bad = rl_acquire(v, &w->send_buf);
    Py_DECREF(v);
    if (bad < 0)
        return 0;
    w->send_index = w->send_at;
    return 1;
}

/* An untagged segment (RFC 5041 §4.3): a plain Send into its posted buffer. */
static int rl_untagged(RlWalk *w, const uint8_t *h, const IwFrame *f, size_t n, const uint8_t *u)
{
    const RlArgs *a = w->a;
    if (!a->send_ok || n < IW_UNTAGGED_HEADER)
        return RL_STOP;
    int ctl = u[1];
    if (ctl != a->send_ctl && ctl != a->send_se_ctl)
        return RL_STOP;
    if (iw_be32(u + IW_UNTAGGED_QN_AT) != 0 || iw_be32(u + IW_UNTAGGED_MSN_AT) != w->msn ||
        (uint64_t)iw_be32(u + IW_UNTAGGED_MO_AT) != w->mo)
        return RL_STOP;
    if (!rl_send_buffer(w))
        return RL_STOP;
    uint64_t len = n - IW_UNTAGGED_HEADER;
    if (w->mo > (uint64_t)w->send_buf.len || len > (uint64_t)w->send_buf.len - w->mo)
        return RL_STOP; /* too long: the Python path reports it */
    if (len)
        iw_gather(h, f, IW_LENGTH_SIZE + IW_UNTAGGED_HEADER, (size_t)len,
                  (uint8_t *)w->send_buf.buf + w->mo);
    /* A Send between tagged segments ends the current record. */
    if (rl_end_run(w) < 0)
        return RL_FAIL;
    w->mo += len;
    if (u[0] & IW_DDP_LAST_FLAG) {
        if (rl_record(w->records, RL_SEND, (uint64_t)w->send_at, w->mo, ctl == a->send_se_ctl,
                      1) < 0)
            return RL_FAIL;
        w->send_at++;
        w->msn++;
        w->mo = 0;
    }
    return RL_PLACED;
}

/* Whether the complete FPDU at `p` (its ULPDU_Length at p + lead) is one
 * the usual path would accept: CRC (RFC 5044 §6) and every marker's FPDUPTR
 * (§4.3, low two bits ignored), as that path checks them (and reports
 * them when wrong). */
static int rl_fpdu_ok(const uint8_t *p, const IwFrame *f, int crc, int either)
{
    if (crc && iw_crc_field(p + f->wire - IW_CRC_SIZE) !=
                   ~iw_crc32c(0xFFFFFFFFu, p, f->wire - IW_CRC_SIZE))
        return 0;
    if (f->lead && (iw_be16(p + 2) & IW_FPDUPTR_MASK))
        return 0;
    const uint8_t *h = p + f->lead;
    for (size_t k = 0; k < f->count; k++) {
        size_t m = f->first + IW_MARKER_INTERVAL * k; /* from `h` */
        if (!iw_fpduptr_ok(iw_be16(h + m + 2) & IW_FPDUPTR_MASK, m, f->lead, f->lead && either))
            return 0;
    }
    return 1;
}

/* Walk the complete FPDUs of buf[at, end) placing what the lane is sure
 * of; returns where it stopped (RL_FAIL's: an error is set, *failed). */
static size_t rl_walk(RlWalk *w, uint8_t *buf, size_t at, size_t end, unsigned *phase,
                      int *failed)
{
    const RlArgs *a = w->a;
    for (;;) {
        size_t lead = a->markers && *phase == 0 ? IW_MARKER_SIZE : 0;
        if (end - at < lead + IW_LENGTH_SIZE)
            break;
        const uint8_t *h = buf + at + lead; /* the ULPDU_Length field */
        size_t n = iw_be16(h);
        if (n > (size_t)a->limit)
            break; /* the Python path reports it */
        IwFrame f = iw_frame(n, *phase, a->markers);
        if (f.wire > end - at || !rl_fpdu_ok(buf + at, &f, a->crc, a->either))
            break;
        /* The DDP/RDMAP header, gathered around markers. */
        uint8_t u[IW_UNTAGGED_HEADER] = {0};
        iw_gather(h, &f, IW_LENGTH_SIZE, n < sizeof u ? n : sizeof u, u);
        if (n < 2 || (u[0] & IW_DDP_VERSION_MASK) != (unsigned)a->version)
            break;
        int done = (u[0] & IW_DDP_TAGGED_FLAG) ? rl_tagged(w, h, &f, n, u)
                                               : rl_untagged(w, h, &f, n, u);
        if (done == RL_FAIL)
            *failed = 1;
        if (done != RL_PLACED)
            break;
        at += f.wire;
        *phase = (unsigned)((*phase + f.wire) & IW_PHASE_MASK);
    }
    return at;
}

/* The records that close a walk: the open run, and where a Send message in
 * progress at the end stands. */
static int rl_walk_end(RlWalk *w)
{
    if (rl_end_run(w) < 0)
        return -1;
    if ((w->mo != (uint64_t)w->a->received || w->send_at > 0) && w->mo &&
        rl_record(w->records, RL_SEND, (uint64_t)w->send_at, w->mo, 0, 0) < 0)
        return -1;
    return 0;
}

/* Make room and read the socket into the ring: the data moves to the
 * front when less room than the largest FPDU is left after it (or nothing
 * is held); then `fd` is read until it is empty or the ring is full.
 * Returns the state bits (see above); -1 with OSError set when the read
 * failed before any octet. */
static int rl_fill(const RlArgs *a, uint8_t *buf, size_t cap, size_t *s0, size_t *e0,
                   size_t *got)
{
    if (*s0 > 0 && (cap - *e0 < IW_FPDU_MAX || *s0 == *e0)) {
        memmove(buf, buf + *s0, *e0 - *s0);
        *e0 -= *s0;
        *s0 = 0;
    }
    *got = 0;
    if (a->fd < 0 || *e0 >= cap)
        return *e0 >= cap ? 2 : 0;
    RlRead r;
    Py_BEGIN_ALLOW_THREADS
    r = rl_read(a->fd, buf, *e0, cap, a->wait_ms);
    Py_END_ALLOW_THREADS
    if (r.error && r.got == 0) {
        errno = r.error;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    /* An error after some octets: they are processed first, the error
     * comes back in the state (the kernel reports it once). */
    *e0 += r.got;
    *got = r.got;
    return (r.eof ? 1 : 0) | (r.full ? 2 : 0) | (r.error << 8);
}

static PyObject *py_recv_lane(PyObject *self, PyObject *args)
{
    RlArgs a;
    if (!rl_parse(args, &a))
        return NULL;
    Py_buffer ring;
    if (PyObject_GetBuffer(a.ring, &ring, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *result = NULL;
    RlWalk w;
    memset(&w, 0, sizeof w);
    size_t cap = (size_t)ring.len;
    if (!rl_args_ok(&a, cap)) {
        PyErr_SetString(PyExc_ValueError, "recv_lane: inconsistent arguments");
        goto done;
    }
    if (!rl_walk_init(&w, &a))
        goto done;
    uint8_t *buf = ring.buf;
    size_t s0 = (size_t)a.start, e0 = (size_t)a.end, got;
    int state = rl_fill(&a, buf, cap, &s0, &e0, &got);
    if (state < 0)
        goto done;
    unsigned phase = a.phase;
    int failed = 0;
    size_t at = rl_walk(&w, buf, s0, e0, &phase, &failed);
    if (failed || rl_walk_end(&w) < 0)
        goto done;
    size_t complete = rl_complete(buf, at, e0, (size_t)a.limit, a.markers, phase);
    result = Py_BuildValue("(nnniOLnnI)", (Py_ssize_t)at, (Py_ssize_t)e0, (Py_ssize_t)complete,
                           state, w.records, w.need, (Py_ssize_t)(at - s0), (Py_ssize_t)got,
                           a.markers ? phase : 0u);
done:
    rl_walk_release(&w);
    PyBuffer_Release(&ring);
    return result;
}
