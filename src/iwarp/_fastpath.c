/*
 * iwarp._speedups.FastPath: the fast path of one queue pair.
 *
 * While a queue pair is in its common case (MPA full operation, the RDMAP
 * stream operational and idle, only its receive pool posted), this object
 * owns the state that case moves: the send MSN and the send direction's
 * MPA position and marker phase; the receive MSN, the receive direction's
 * position and phase and the count of pool buffers taken (each is reposted
 * at once, so the posted queue only turns). The cores hand it over and take
 * it back in one call each (iwarp/rdma/fastpath.py); the pure-Python twin
 * there, PyFastPath, has the same methods, results and errors.
 *
 * FastPath(send, receive, messages, events, make_event)
 *     send = (version, send, send_se, msn, markers, crc, phase, max_payload)
 *     receive = (version, send, send_se, msn, markers, crc, phase, limit, size)
 *     messages: the queue pair's message queue (a deque: its append is used);
 *     events: a dict of MessageQueued events by size, make_event(size) for
 *     a size it lacks.
 * send(data, solicited=False) -> FPDU (bytes) or None
 *     A Send of `data` in one DDP segment, framed (RFC 5044 §4.1, §4.3),
 *     its MSN used. None (nothing done): not a contiguous buffer, or larger
 *     than one segment.
 * receive(data) -> list of events, or None
 *     Takes the whole FPDUs at the start of `data` that are one-segment
 *     Sends or Sends with Solicited Event for the next MSN whose payload fits
 *     a pool buffer (iw_small_check: length, markers, CRC, DDP/RDMAP
 *     header); each payload is copied out to `messages` and its event put in
 *     the list. None: the first FPDU was declined, nothing was done. After a
 *     list, `rest` is the count of octets it left (from the first it
 *     declined) and `octets` the message octets it queued.
 * state() -> (send MSN, octets sent, send phase, receive MSN, octets
 *     received, receive phase, messages received): what the cores take back.
 *
 * Anything it does not fully check it declines, so the cores' verdict
 * (Terminate codes, MPA errors) on such input is unchanged.
 */
#include "_speedups.h"
#include "_wire.h"

#include <string.h>

#include <structmember.h>


typedef struct {
    PyObject_HEAD
    IwFraming tx, rx;
    IwSendWant want;           /* the next Send to take */
    uint8_t tx_control;        /* DDP control octet: version, L set */
    uint8_t tx_send, tx_send_se;
    uint32_t tx_msn, tx_octets, rx_octets;
    Py_ssize_t tx_max;         /* payload octets one segment holds */
    Py_ssize_t rx_size;        /* octets of a pool buffer */
    Py_ssize_t taken;          /* messages received */
    Py_ssize_t octets, rest;   /* of the last receive */
    PyObject *append, *events, *make_event;
    PyObject *last_event;      /* the event of the last message, its size */
    size_t last_length;
} FastPath;

static int fp_check_phase(Py_ssize_t phase)
{
    if (phase < 0 || phase > 511 || (phase & 3)) {
        PyErr_SetString(PyExc_ValueError, "phase must be a multiple of 4 below 512");
        return 0;
    }
    return 1;
}

static int fp_check_octet(Py_ssize_t value, Py_ssize_t top, const char *what)
{
    if (value < 0 || value > top) {
        PyErr_Format(PyExc_ValueError, "%s must be 0 .. %zd", what, top);
        return 0;
    }
    return 1;
}

static int fp_set_send(FastPath *self, PyObject *send)
{
    Py_ssize_t version, op, op_se, msn, phase, max_payload;
    int markers, crc;
    if (!PyArg_ParseTuple(send, "nnnnppnn;send must be (version, send, send_se, msn, markers, "
                                "crc, phase, max_payload)",
                          &version, &op, &op_se, &msn, &markers, &crc, &phase, &max_payload))
        return 0;
    if (!fp_check_octet(version, 3, "version") || !fp_check_octet(op, 255, "send") ||
        !fp_check_octet(op_se, 255, "send_se") || !fp_check_octet(msn, 0xFFFFFFFF, "msn") ||
        !fp_check_phase(phase) ||
        !fp_check_octet(max_payload, 0xFFFF - IW_UNTAGGED_HEADER, "max_payload"))
        return 0;
    self->tx = (IwFraming){markers, crc, (unsigned)phase};
    self->tx_control = (uint8_t)(version | IW_DDP_LAST_FLAG);
    self->tx_send = (uint8_t)op;
    self->tx_send_se = (uint8_t)op_se;
    self->tx_msn = (uint32_t)msn;
    self->tx_max = max_payload;
    return 1;
}

static int fp_set_receive(FastPath *self, PyObject *receive)
{
    Py_ssize_t version, op, op_se, msn, phase, limit, size;
    int markers, crc;
    if (!PyArg_ParseTuple(receive, "nnnnppnnn;receive must be (version, send, send_se, msn, "
                                   "markers, crc, phase, limit, size)",
                          &version, &op, &op_se, &msn, &markers, &crc, &phase, &limit, &size))
        return 0;
    if (!fp_check_octet(version, 3, "version") || !fp_check_octet(op, 255, "send") ||
        !fp_check_octet(op_se, 255, "send_se") || !fp_check_octet(msn, 0xFFFFFFFF, "msn") ||
        !fp_check_phase(phase) || !fp_check_octet(limit, 0xFFFF, "limit") ||
        !fp_check_octet(size, PY_SSIZE_T_MAX, "size"))
        return 0;
    self->rx = (IwFraming){markers, crc, (unsigned)phase};
    self->want = (IwSendWant){limit, version, (uint32_t)msn, op, op_se};
    self->rx_size = size;
    return 1;
}

static int fp_init(FastPath *self, PyObject *args, PyObject *kwargs)
{
    PyObject *send, *receive, *messages, *events, *make_event;
    static char *names[] = {"send", "receive", "messages", "events", "make_event", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!OO!O:FastPath", names, &PyTuple_Type,
                                     &send, &PyTuple_Type, &receive, &messages, &PyDict_Type,
                                     &events, &make_event))
        return -1;
    if (!PyCallable_Check(make_event)) {
        PyErr_SetString(PyExc_TypeError, "make_event must be callable");
        return -1;
    }
    if (!fp_set_send(self, send) || !fp_set_receive(self, receive))
        return -1;
    PyObject *append = PyObject_GetAttrString(messages, "append");
    if (append == NULL)
        return -1;
    Py_XSETREF(self->append, append);
    Py_INCREF(events);
    Py_XSETREF(self->events, events);
    Py_INCREF(make_event);
    Py_XSETREF(self->make_event, make_event);
    Py_CLEAR(self->last_event);
    self->tx_octets = self->rx_octets = 0;
    self->taken = self->octets = self->rest = 0;
    return 0;
}

static int fp_ready(FastPath *self)
{
    if (self->append != NULL)
        return 1;
    PyErr_SetString(PyExc_ValueError, "FastPath is not initialised");
    return 0;
}

/* A buffer's octets, or 0 with no error: not a contiguous buffer (with
 * `format`: not a one-dimensional buffer of unsigned bytes; the cores take
 * it and say what is wrong). Other errors are raised (-1). */
static int fp_octets(PyObject *obj, Py_buffer *view, int format)
{
    if (PyBytes_CheckExact(obj)) { /* the usual input: no exporter to ask */
        view->obj = NULL;
        view->buf = PyBytes_AS_STRING(obj);
        view->len = PyBytes_GET_SIZE(obj);
        return 1;
    }
    if (PyObject_GetBuffer(obj, view, format ? PyBUF_FORMAT | PyBUF_ND : PyBUF_SIMPLE) == 0) {
        if (!format || (view->ndim == 1 && (view->format == NULL || strcmp(view->format, "B") == 0)))
            return 1;
        PyBuffer_Release(view);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_BufferError))
        return -1;
    PyErr_Clear();
    return 0;
}

static PyObject *fp_send_data(FastPath *self, PyObject *obj, int solicited)
{
    if (!fp_ready(self))
        return NULL;
    Py_buffer data;
    int got = fp_octets(obj, &data, 0);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *frame = NULL;
    if (data.len > self->tx_max) {
        frame = Py_NewRef(Py_None); /* more than one segment: the cores segment it */
        goto done;
    }
    /* RFC 5041 §4.3: the untagged header of the last (only) segment, queue
     * 0, MO 0; its second octet is RDMAP's control octet (RFC 5040 §4.2). */
    uint32_t msn = self->tx_msn;
    /* RFC 5041 §4.3 untagged header and RDMAP's octet: queue 0, MSN, MO 0. */
    uint8_t header[IW_UNTAGGED_HEADER] = {self->tx_control,
                                          solicited ? self->tx_send_se : self->tx_send};
    iw_put_be(header + IW_UNTAGGED_MSN_AT, 4, msn);
    IwFraming tx = self->tx;
    frame = iw_small_frame(&tx, header, IW_UNTAGGED_HEADER, data.buf, (size_t)data.len);
    if (frame != NULL) {
        self->tx = tx;
        self->tx_msn = msn + 1;
        self->tx_octets += (uint32_t)PyBytes_GET_SIZE(frame);
    }
done:
    PyBuffer_Release(&data);
    return frame;
}

static PyObject *fp_send(FastPath *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "send() takes 1 or 2 arguments (%zd given)", nargs);
        return NULL;
    }
    int solicited = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (solicited < 0)
        return NULL;
    return fp_send_data(self, args[0], solicited);
}

/* The event of a message of `length` octets: the shared one, else made
 * (the last one is kept: a flow of messages mostly has one size). */
static PyObject *fp_event(FastPath *self, size_t length)
{
    if (self->last_event != NULL && self->last_length == length)
        return Py_NewRef(self->last_event);
    PyObject *key = PyLong_FromSize_t(length);
    if (key == NULL)
        return NULL;
    PyObject *event = PyDict_GetItemWithError(self->events, key);
    if (event != NULL)
        Py_INCREF(event);
    else if (!PyErr_Occurred())
        event = PyObject_CallOneArg(self->make_event, key);
    Py_DECREF(key);
    if (event != NULL) {
        Py_XSETREF(self->last_event, Py_NewRef(event));
        self->last_length = length;
    }
    return event;
}

/* Takes the FPDU at p when it is the next pool message: its octets on the
 * wire (its event appended to `out`), 0 declined (nothing done), -1 error
 * (nothing of it done). */
static Py_ssize_t fp_take(FastPath *self, const uint8_t *p, size_t size, PyObject *out)
{
    IwSmallSend fpdu;
    if (!iw_small_check(&self->rx, &self->want, p, size, &fpdu) ||
        fpdu.length > (size_t)self->rx_size)
        return 0; /* too long for a pool buffer: DDP reports it (RFC 5041 §7.1) */
    PyObject *message = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)fpdu.length);
    if (message == NULL)
        return -1;
    iw_small_payload(&self->rx, p, &fpdu, (uint8_t *)PyBytes_AS_STRING(message));
    PyObject *event = fp_event(self, fpdu.length);
    if (event == NULL) {
        Py_DECREF(message);
        return -1;
    }
    int failed = PyList_Append(out, event) < 0;
    Py_DECREF(event);
    PyObject *done = failed ? NULL : PyObject_CallOneArg(self->append, message);
    Py_DECREF(message);
    if (done == NULL) {
        if (!failed) /* the event stays out with its message */
            PyList_SetSlice(out, PyList_GET_SIZE(out) - 1, PyList_GET_SIZE(out), NULL);
        return -1;
    }
    Py_DECREF(done);
    self->rx.phase = (unsigned)((self->rx.phase + fpdu.wire) & 511u);
    self->rx_octets += (uint32_t)fpdu.wire;
    self->want.msn += 1;
    self->taken += 1;
    self->octets += (Py_ssize_t)fpdu.length;
    return (Py_ssize_t)fpdu.wire;
}

static PyObject *fp_receive(FastPath *self, PyObject *arg)
{
    if (!fp_ready(self))
        return NULL;
    Py_buffer data;
    int got = fp_octets(arg, &data, 1);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    const uint8_t *p = data.buf;
    size_t size = (size_t)data.len, at = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    self->octets = 0;
    while (at < size) {
        Py_ssize_t wire = fp_take(self, p + at, size - at, out);
        if (wire < 0)
            goto fail;
        if (wire == 0)
            break;
        at += (size_t)wire;
    }
    PyBuffer_Release(&data);
    if (at == 0) {
        Py_DECREF(out);
        return Py_NewRef(Py_None);
    }
    self->rest = (Py_ssize_t)(size - at);
    return out;
fail:
    /* What was taken before the error stays taken: its messages are queued
     * (their events are lost with the exception). */
    Py_XDECREF(out);
    self->rest = (Py_ssize_t)(size - at);
    PyBuffer_Release(&data);
    return NULL;
}

static PyObject *fp_state(FastPath *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(kkIkkIn)", (unsigned long)self->tx_msn,
                         (unsigned long)self->tx_octets, self->tx.phase,
                         (unsigned long)self->want.msn, (unsigned long)self->rx_octets,
                         self->rx.phase, self->taken);
}

static int fp_traverse(FastPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->append);
    Py_VISIT(self->events);
    Py_VISIT(self->make_event);
    Py_VISIT(self->last_event);
    return 0;
}

static int fp_clear(FastPath *self)
{
    Py_CLEAR(self->append);
    Py_CLEAR(self->events);
    Py_CLEAR(self->make_event);
    Py_CLEAR(self->last_event);
    return 0;
}

static void fp_dealloc(FastPath *self)
{
    PyObject_GC_UnTrack(self);
    fp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef fp_methods[] = {
    {"send", (PyCFunction)(void (*)(void))fp_send, METH_FASTCALL,
     "send(data, solicited=False): the FPDU of a one-segment Send, or None."},
    {"receive", (PyCFunction)fp_receive, METH_O,
     "receive(data): the events of the pool messages taken, or None."},
    {"state", (PyCFunction)fp_state, METH_NOARGS, "The state the cores take back."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef fp_members[] = {
    {"octets", T_PYSSIZET, offsetof(FastPath, octets), READONLY,
     "Message octets the last receive queued."},
    {"rest", T_PYSSIZET, offsetof(FastPath, rest), READONLY,
     "Octets the last receive left to the cores (from the first it declined)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "iwarp._speedups.FastPath",
    .tp_basicsize = sizeof(FastPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The fast path of one queue pair (iwarp.rdma.fastpath).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fp_init,
    .tp_dealloc = (destructor)fp_dealloc,
    .tp_traverse = (traverseproc)fp_traverse,
    .tp_clear = (inquiry)fp_clear,
    .tp_methods = fp_methods,
    .tp_members = fp_members,
};

int iw_is_fastpath(PyObject *obj)
{
    return Py_IS_TYPE(obj, &FastPathType);
}

PyObject *iw_fastpath_send(PyObject *fast, PyObject *data, int solicited)
{
    return fp_send_data((FastPath *)fast, data, solicited);
}

PyObject *iw_fastpath_receive(PyObject *fast, PyObject *data, Py_ssize_t *octets,
                              Py_ssize_t *rest)
{
    FastPath *self = (FastPath *)fast;
    PyObject *done = fp_receive(self, data);
    *octets = self->octets;
    *rest = self->rest;
    return done;
}

int iw_fastpath_add(PyObject *module)
{
    if (PyType_Ready(&FastPathType) < 0)
        return -1;
    Py_INCREF(&FastPathType);
    if (PyModule_AddObject(module, "FastPath", (PyObject *)&FastPathType) < 0) {
        Py_DECREF(&FastPathType);
        return -1;
    }
    return 0;
}
