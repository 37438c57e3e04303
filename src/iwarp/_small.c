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
#include "_wire.h"

#include <string.h>

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

/* --- the shared framing and checks (also _fastpath.c's) ---------------- */

PyObject *iw_small_frame(IwFraming *f, const uint8_t *header, size_t hlen,
                         const uint8_t *payload, size_t plen)
{
    if (hlen > IW_MAX_ULPDU || plen > IW_MAX_ULPDU - hlen) {
        PyErr_SetString(PyExc_ValueError, "the ULPDU exceeds the 16-bit ULPDU_Length field");
        return NULL;
    }
    size_t n = hlen + plen;
    IwFrame shape = iw_frame(n, f->phase, f->markers);
    if (iw_last_fpduptr(&shape) > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError,
                        "a marker's FPDUPTR would exceed its 16 bits (RFC 5044 §4.3)");
        return NULL;
    }
    PyObject *frame = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)shape.wire);
    if (frame == NULL)
        return NULL;
    IwWriter w = {(uint8_t *)PyBytes_AS_STRING(frame), 0, f->phase, 0, f->markers};
    iw_write_begin(&w, n);
    iw_write(&w, header, hlen);
    iw_write(&w, payload, plen);
    iw_write_pad(&w, n);
    iw_write_crc(&w, f->crc ? ~iw_crc32c(0xFFFFFFFFu, w.out, w.pos) : 0);
    f->phase = w.phase;
    return frame;
}

int iw_small_check(const IwFraming *f, const IwSendWant *want, const uint8_t *p, size_t size,
                   IwSmallSend *out)
{
    size_t lead = f->markers && f->phase == 0 ? IW_MARKER_SIZE : 0;
    if (size < lead + IW_LENGTH_SIZE + IW_UNTAGGED_HEADER + IW_CRC_SIZE)
        return 0;
    if (lead && (p[0] | p[1] | p[2] | p[3]))
        return 0;
    size_t n = iw_be16(p + lead);
    if (want->limit < 0 || n > (size_t)want->limit || n < IW_UNTAGGED_HEADER)
        return 0;
    IwFrame shape = iw_frame(n, f->phase, f->markers);
    if (shape.wire > size || iw_last_fpduptr(&shape) > 0xFFFF)
        return 0; /* (markers past 64 KiB: the full path's MPA error 3) */
    const uint8_t *h = p + lead; /* the ULPDU_Length field */
    for (size_t k = 0; k < shape.count; k++) {
        /* Exactly what an RFC 5044 sender writes: Reserved zero, FPDUPTR. */
        size_t m = shape.first + IW_MARKER_INTERVAL * k;
        if (iw_be16(h + m) != 0 || iw_be16(h + m + 2) != m)
            return 0;
    }
    if (f->crc && iw_crc_field(p + shape.wire - IW_CRC_SIZE) !=
                      ~iw_crc32c(0xFFFFFFFFu, p, shape.wire - IW_CRC_SIZE))
        return 0;
    uint8_t hdr[IW_UNTAGGED_HEADER];
    iw_gather(h, &shape, IW_LENGTH_SIZE, IW_UNTAGGED_HEADER, hdr);
    unsigned control = hdr[0], rdmap = hdr[1];
    if ((Py_ssize_t)(control & (IW_DDP_TAGGED_FLAG | IW_DDP_VERSION_MASK)) != want->version ||
        !(control & IW_DDP_LAST_FLAG) ||
        ((Py_ssize_t)rdmap != want->send && (Py_ssize_t)rdmap != want->send_se) ||
        iw_be32(hdr + IW_UNTAGGED_QN_AT) != 0 || iw_be32(hdr + IW_UNTAGGED_MSN_AT) != want->msn ||
        iw_be32(hdr + IW_UNTAGGED_MO_AT) != 0)
        return 0;
    out->wire = shape.wire;
    out->length = n - IW_UNTAGGED_HEADER;
    out->rdmap = rdmap;
    return 1;
}

void iw_small_payload(const IwFraming *f, const uint8_t *p, const IwSmallSend *fpdu, uint8_t *dst)
{
    IwFrame shape = iw_frame(fpdu->length + IW_UNTAGGED_HEADER, f->phase, f->markers);
    iw_gather(p + shape.lead, &shape, IW_LENGTH_SIZE + IW_UNTAGGED_HEADER, fpdu->length, dst);
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
    if (phase_arg < 0 || phase_arg > IW_PHASE_MASK || (phase_arg & 3)) {
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
    if (phase_arg < 0 || phase_arg > IW_PHASE_MASK || (phase_arg & 3)) {
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
                           (unsigned long)((f.phase + size) & IW_PHASE_MASK));
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
