/*
 * iwarp._speedups, the small-message lane: a one-segment Send framed into
 * its FPDU in one call, and a received whole FPDU that is a one-segment
 * Send for the head posted receive buffer checked and placed in one call.
 *
 * small_send(header, payload, markers, crc, phase) -> (fpdu, phase)
 *     The FPDU (RFC 5044 §4.1: ULPDU_Length, ULPDU, PAD, CRC; markers every
 *     512 octets from the marker origin, §4.3) of the ULPDU header+payload,
 *     whose first octet is at marker phase `phase`; and the phase after it.
 *     The octets are exactly those FpduEncoder.encode gives. ValueError
 *     when a marker's FPDUPTR would not fit its 16 bits (a marked ULPDU of
 *     about 65,000 octets or more; senders keep MULPDU below that).
 *
 * small_receive(data, markers, crc, phase, limit, version, msn,
 *               send, send_se, head) -> (length, rdmap, phase) or None
 *     When `data` is exactly one whole FPDU starting at marker phase `phase`
 *     (length field <= limit, every marker and the CRC right) whose ULPDU is
 *     one untagged DDP segment (RFC 5041 §4.3) of version `version` with L
 *     set, queue 0, MSN `msn`, MO 0, RDMAP control octet `send` or `send_se`
 *     (RFC 5040 §4.2), and whose payload fits `head` (a writable buffer):
 *     the payload is copied to the start of `head` and the completion record
 *     returned: payload length, the RDMAP control octet, the marker phase
 *     after the FPDU. Anything else: None, and nothing was written; the
 *     full path takes `data` and reports what is wrong with it. Only what
 *     the full path accepts is accepted here (markers must be exactly what
 *     an RFC 5044 sender writes; the full path also tolerates set low bits;
 *     an FPDU whose markers would count back past 0xFFFF is declined: the
 *     full path refuses it with MPA error 3).
 *
 * The protocol's decisions (MSN, which buffer, completions, the stream
 * position) stay with the Python cores; this file only checks and moves
 * octets. The pure-Python twin is iwarp/_small.py.
 */
#include "_speedups.h"

#include <string.h>

#define SM_INTERVAL 512u /* RFC 5044 §4.3: a marker every 512 octets */
#define SM_PHASE_MASK 511u
#define SM_STRIDE 508u       /* content octets between two markers */
#define SM_UNTAGGED 18u      /* RFC 5041 §4.3 untagged header + RDMAP's octet */
#define SM_TAGGED_FLAG 0x80u /* RFC 5041 §4.1 DDP control: T, L, DV */
#define SM_LAST_FLAG 0x40u
#define SM_VERSION_MASK 0x03u

static inline uint32_t sm_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Content octets of an FPDU: length field, ULPDU, PAD, CRC. */
static inline size_t sm_content(size_t ulpdu)
{
    return 6 + ulpdu + ((4 - ((2 + ulpdu) & 3)) & 3);
}

/* The framing geometry of one FPDU: the leading marker and where the first
 * marker inside falls, as content offset (`at`; later ones every 508). */
typedef struct {
    size_t lead, at, content, wire;
} SmShape;

static SmShape sm_shape(size_t ulpdu, unsigned phase, int markers)
{
    SmShape s;
    s.content = sm_content(ulpdu);
    s.lead = markers && phase == 0 ? 4 : 0;
    s.at = SM_INTERVAL - ((phase + s.lead) & SM_PHASE_MASK);
    s.wire = s.lead + s.content;
    if (markers && s.at < s.content)
        s.wire += 4 * ((s.content - s.at + SM_STRIDE - 1) / SM_STRIDE);
    return s;
}

/* FPDUPTR of the FPDU's last marker inside it (0: none). RFC 5044 §4.3's
 * FPDUPTR is 16 bits: an FPDU whose markers would count back further
 * cannot be framed, and the full path refuses one (MPA error 3). */
static size_t sm_last_ptr(const SmShape *s)
{
    size_t count = (s->wire - s->lead - s->content) / 4;
    return count ? s->at + SM_INTERVAL * (count - 1) : 0;
}

/* Appends content octets to an FPDU being built, a marker before the
 * content offset `next` and every 508 content octets after it. */
typedef struct {
    uint8_t *out;
    size_t w, c, next;
    int markers;
} SmEmit;

/* A marker at the current wire offset: reserved zero, FPDUPTR. */
static void sm_marker(SmEmit *e, size_t lead)
{
    size_t ptr = e->w - lead; /* back to the ULPDU_Length field */
    e->out[e->w] = 0;
    e->out[e->w + 1] = 0;
    e->out[e->w + 2] = (uint8_t)(ptr >> 8);
    e->out[e->w + 3] = (uint8_t)ptr;
    e->w += 4;
}

static void sm_put(SmEmit *e, size_t lead, const uint8_t *src, size_t len)
{
    while (len) {
        if (e->markers && e->c == e->next) {
            sm_marker(e, lead);
            e->next += SM_STRIDE;
        }
        size_t chunk = len;
        if (e->markers && e->next - e->c < chunk)
            chunk = e->next - e->c;
        memcpy(e->out + e->w, src, chunk);
        e->w += chunk;
        e->c += chunk;
        src += chunk;
        len -= chunk;
    }
}

/* The arguments, converted as PyArg_ParseTuple's formats would ("y*" and
 * "w*": a contiguous buffer, writable for "w*", else TypeError; "p": truth;
 * "n": an integer as Py_ssize_t, OverflowError beyond), without a tuple:
 * these kernels run per small message. */
static int sm_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) == 0)
        return 1;
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a %sbytes-like object, not '%.100s'", what,
                 writable ? "writable " : "", Py_TYPE(obj)->tp_name);
    return 0;
}

static int sm_ints(PyObject *const *args, Py_ssize_t n, Py_ssize_t *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyNumber_AsSsize_t(args[i], PyExc_OverflowError);
        if (out[i] == -1 && PyErr_Occurred())
            return 0;
    }
    return 1;
}

static int sm_flags(PyObject *const *args, Py_ssize_t n, int *out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyObject_IsTrue(args[i]);
        if (out[i] < 0)
            return 0;
    }
    return 1;
}

static int sm_nargs(Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs == want)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name, want,
                 nargs);
    return 0;
}

PyObject *iw_small_frame(IwFraming *f, const uint8_t *header, size_t hlen,
                         const uint8_t *payload, size_t plen)
{
    if (hlen > 0xFFFF || plen > 0xFFFF - hlen) {
        PyErr_SetString(PyExc_ValueError, "the ULPDU exceeds the 16-bit ULPDU_Length field");
        return NULL;
    }
    size_t n = hlen + plen;
    int markers = f->markers;
    SmShape s = sm_shape(n, f->phase, markers);
    if (sm_last_ptr(&s) > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError,
                        "a marker's FPDUPTR would exceed its 16 bits (RFC 5044 §4.3)");
        return NULL;
    }
    PyObject *frame = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)s.wire);
    if (frame == NULL)
        return NULL;
    SmEmit e = {(uint8_t *)PyBytes_AS_STRING(frame), 0, 0, s.at, markers};
    if (s.lead) { /* a zero marker between FPDUs belongs to the next (§4.3) */
        memset(e.out, 0, 4);
        e.w = 4;
    }
    static const uint8_t zeros[4] = {0, 0, 0, 0};
    uint8_t length[2] = {(uint8_t)(n >> 8), (uint8_t)n};
    sm_put(&e, s.lead, length, 2);
    sm_put(&e, s.lead, header, hlen);
    sm_put(&e, s.lead, payload, plen);
    sm_put(&e, s.lead, zeros, s.content - 6 - n);
    if (markers && e.c == e.next) { /* a marker after the PAD, before the CRC */
        sm_marker(&e, s.lead);
    }
    uint32_t value = f->crc ? ~iw_crc32c(0xFFFFFFFFu, e.out, e.w) : 0;
    /* RFC 5044 §4.1: the CRC field as the CRC32c register's octets */
    e.out[e.w] = (uint8_t)value;
    e.out[e.w + 1] = (uint8_t)(value >> 8);
    e.out[e.w + 2] = (uint8_t)(value >> 16);
    e.out[e.w + 3] = (uint8_t)(value >> 24);
    f->phase = (unsigned)((f->phase + s.wire) & SM_PHASE_MASK);
    return frame;
}

static PyObject *py_small_send(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer header, payload;
    int flags[2];
    Py_ssize_t phase_arg;
    (void)self;
    /* Integers as Py_ssize_t, as the other kernels take them: one outside
     * its range raises OverflowError, as in the pure twin. */
    if (!sm_nargs(nargs, 5, "small_send") || !sm_buffer(args[0], &header, 0, "header"))
        return NULL;
    if (!sm_buffer(args[1], &payload, 0, "payload")) {
        PyBuffer_Release(&header);
        return NULL;
    }
    if (!sm_flags(args + 2, 2, flags) || !sm_ints(args + 4, 1, &phase_arg)) {
        PyBuffer_Release(&header);
        PyBuffer_Release(&payload);
        return NULL;
    }
    PyObject *result = NULL;
    if (phase_arg < 0 || phase_arg > SM_PHASE_MASK || (phase_arg & 3)) {
        PyErr_SetString(PyExc_ValueError, "phase must be a multiple of 4 below 512");
        goto done;
    }
    IwFraming f = {flags[0], flags[1], (unsigned)phase_arg};
    PyObject *frame = iw_small_frame(&f, header.buf, (size_t)header.len, payload.buf,
                                     (size_t)payload.len);
    if (frame != NULL)
        result = Py_BuildValue("(Nk)", frame, (unsigned long)f.phase);
done:
    PyBuffer_Release(&header);
    PyBuffer_Release(&payload);
    return result;
}

/* Copies content octets [c, c + len) of a received FPDU to dst, skipping the
 * markers (the first at content offset `at`, then every 508). */
static void sm_gather(const uint8_t *wire, const SmShape *s, int markers, size_t c, uint8_t *dst,
                      size_t len)
{
    size_t next = s->at, skipped = 0;
    if (markers)
        while (next <= c) {
            next += SM_STRIDE;
            skipped += 4;
        }
    while (len) {
        size_t chunk = len;
        if (markers && next - c < chunk)
            chunk = next - c;
        memmove(dst, wire + s->lead + c + skipped, chunk); /* dst may be any buffer */
        dst += chunk;
        c += chunk;
        len -= chunk;
        if (markers && c == next) {
            next += SM_STRIDE;
            skipped += 4;
        }
    }
}

int iw_small_check(const IwFraming *f, const IwSendWant *want, const uint8_t *p, size_t size,
                   IwSmallSend *out)
{
    int markers = f->markers;
    unsigned phase = f->phase;
    size_t lead = markers && phase == 0 ? 4 : 0;
    if (size < lead + 2 + SM_UNTAGGED + 4)
        return 0;
    if (lead && (p[0] | p[1] | p[2] | p[3]))
        return 0;
    size_t n = ((size_t)p[lead] << 8) | p[lead + 1];
    if (want->limit < 0 || n > (size_t)want->limit || n < SM_UNTAGGED)
        return 0;
    SmShape s = sm_shape(n, phase, markers);
    if (s.wire > size || sm_last_ptr(&s) > 0xFFFF)
        return 0; /* (markers past 64 KiB: the full path's MPA error 3) */
    if (markers) {
        for (size_t at = s.at, k = 0; at < s.content; at += SM_STRIDE, k++) {
            size_t off = lead + at + 4 * k;
            if (off > s.wire - 4)
                return 0;
            size_t ptr = off - lead;
            if (p[off] | p[off + 1] || p[off + 2] != (uint8_t)(ptr >> 8) ||
                p[off + 3] != (uint8_t)ptr)
                return 0;
        }
    }
    if (f->crc) {
        const uint8_t *c = p + s.wire - 4;
        uint32_t field = (uint32_t)c[0] | ((uint32_t)c[1] << 8) | ((uint32_t)c[2] << 16) |
                         ((uint32_t)c[3] << 24);
        if (field != ~iw_crc32c(0xFFFFFFFFu, p, s.wire - 4))
            return 0;
    }
    uint8_t hdr[SM_UNTAGGED];
    sm_gather(p, &s, markers, 2, hdr, SM_UNTAGGED);
    unsigned control = hdr[0], rdmap = hdr[1];
    if ((Py_ssize_t)(control & (SM_TAGGED_FLAG | SM_VERSION_MASK)) != want->version ||
        !(control & SM_LAST_FLAG) ||
        ((Py_ssize_t)rdmap != want->send && (Py_ssize_t)rdmap != want->send_se) ||
        sm_be32(hdr + 6) != 0 || sm_be32(hdr + 10) != want->msn || sm_be32(hdr + 14) != 0)
        return 0;
    out->wire = s.wire;
    out->length = n - SM_UNTAGGED;
    out->rdmap = rdmap;
    return 1;
}

void iw_small_payload(const IwFraming *f, const uint8_t *p, const IwSmallSend *fpdu, uint8_t *dst)
{
    SmShape s = sm_shape(fpdu->length + SM_UNTAGGED, f->phase, f->markers);
    sm_gather(p, &s, f->markers, 2 + SM_UNTAGGED, dst, fpdu->length);
}

static PyObject *py_small_receive(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer data, head;
    int flags[2];
    Py_ssize_t ints[6];
    (void)self;
    /* Integers as Py_ssize_t (OverflowError beyond, as in the pure twin),
     * each compared as Python compares it: a negative limit takes nothing,
     * a value outside its field never matches, the MSN counts modulo 2**32.
     * Converted in argument order: data, the flags and integers, head. */
    if (!sm_nargs(nargs, 10, "small_receive") || !sm_buffer(args[0], &data, 0, "data"))
        return NULL;
    if (!sm_flags(args + 1, 2, flags) || !sm_ints(args + 3, 6, ints) ||
        !sm_buffer(args[9], &head, 1, "head")) {
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_ssize_t phase_arg = ints[0];
    PyObject *result = NULL;
    if (phase_arg < 0 || phase_arg > SM_PHASE_MASK || (phase_arg & 3)) {
        PyErr_SetString(PyExc_ValueError, "phase must be a multiple of 4 below 512");
        goto done;
    }
    /* The payload is gathered piece by piece past the markers: it must not
     * land on octets still to be read (the rule of the other kernels). */
    if (iw_overlaps(&head, &data)) {
        PyErr_SetString(PyExc_ValueError, "small_receive: head overlaps data");
        goto done;
    }
    IwFraming f = {flags[0], flags[1], (unsigned)phase_arg};
    IwSendWant want = {ints[1], ints[2], (uint32_t)ints[3], ints[4], ints[5]};
    IwSmallSend fpdu;
    size_t size = (size_t)data.len;
    /* Exactly one whole FPDU, whose payload fits head (else DDP reports the
     * message too long, RFC 5041 §7.1). */
    if (!iw_small_check(&f, &want, data.buf, size, &fpdu) || fpdu.wire != size ||
        fpdu.length > (size_t)head.len) {
        Py_INCREF(Py_None);
        result = Py_None;
        goto done;
    }
    iw_small_payload(&f, data.buf, &fpdu, head.buf);
    result = Py_BuildValue("(kIk)", (unsigned long)fpdu.length, fpdu.rdmap,
                           (unsigned long)((f.phase + size) & SM_PHASE_MASK));
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&head);
    return result;
}

PyMethodDef iw_small_methods[] = {
    {"small_send", (PyCFunction)(void (*)(void))py_small_send, METH_FASTCALL,
     "Frame a one-segment Send into its FPDU."},
    {"small_receive", (PyCFunction)(void (*)(void))py_small_receive, METH_FASTCALL,
     "Check a whole FPDU that is a one-segment Send and place it; None otherwise."},
    {NULL, NULL, 0, NULL},
};
