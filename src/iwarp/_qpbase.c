/*
 * iwarp._speedups.QueuePairBase: the calls a driver makes per message.
 *
 * iwarp.rdma.endpoint.QueuePairEndpoint derives from it, or from its
 * pure-Python twin iwarp.rdma.qpbase.PyQueuePairBase (same methods,
 * results and errors; that module's docstrings are the contract of both).
 * send_now, receive_data, take_message and settled run once or twice per
 * message;
 * while a fast path runs (the `_fast` attribute, iwarp.rdma.fastpath) they
 * are its calls with no Python frame between the driver and it, as an
 * RNIC's doorbell is no firmware call. What the fast path declines, and
 * every call while none runs, goes to the subclass's Python:
 *
 *     _send_slow(data, solicited, invalidate_stag) -> FPDU or None
 *     _receive_slow(data, now, done) -> events
 *         done: None, or the events of the messages the fast path took
 *         from the start of `data` before the first FPDU it declined
 *         (that FPDU begins fast.rest octets before the end of `data`).
 *
 *     _settled_slow() -> bool
 *
 * Attributes: _fast (a FastPath, or None), _messages (the message queue, a
 * deque, or None), message_octets (message octets queued and not taken),
 * _settled_fast (settled() while the fast path runs: the cores were
 * settled when it began, and only its own calls move them meanwhile).
 */
#include "_speedups.h"

#include <structmember.h>


typedef struct {
    PyObject_HEAD
    PyObject *fast;            /* the fast path while it runs, else NULL/None */
    PyObject *messages;        /* the message queue (a deque), else NULL/None */
    Py_ssize_t message_octets; /* of the messages queued */
    char settled_fast;         /* the cores were settled when the fast path began */
} QueuePairBase;

/* Interned names (made once when the type is added). */
static PyObject *s_data, *s_now, *s_solicited, *s_invalidate_stag;
static PyObject *s_send_slow, *s_receive_slow, *s_settled_slow, *s_popleft, *s_send, *s_receive;
static PyObject *s_octets, *s_rest;

static int qb_is_set(PyObject *obj)
{
    return obj != NULL && obj != Py_None;
}

/* Puts the call's arguments in out[0..count) by position, then by the
 * keyword names in `names` (interned: a call site's own names are the same
 * objects; others are compared by value). Positional ones beyond `positional`,
 * unknown or repeated names, and missing ones without a default (out[k]
 * NULL on entry) are TypeErrors, as Python's own. */
static int qb_args(const char *what, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                   PyObject *const *names, Py_ssize_t count, Py_ssize_t positional,
                   PyObject **out)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs > positional) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd positional arguments but %zd were given",
                     what, positional + 1, nargs + 1);
        return 0;
    }
    for (Py_ssize_t k = 0; k < nargs; k++)
        out[k] = args[k];
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        Py_ssize_t k = 0;
        while (k < count && name != names[k] && PyUnicode_Compare(name, names[k]) != 0)
            k++;
        if (PyErr_Occurred())
            return 0;
        if (k == count || k < nargs) {
            PyErr_Format(PyExc_TypeError, "%s() got %s keyword argument '%S'", what,
                         k == count ? "an unexpected" : "multiple values for", name);
            return 0;
        }
        out[k] = args[nargs + i];
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        if (out[k] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%S'", what,
                         names[k]);
            return 0;
        }
    }
    return 1;
}

/* send_now(data, *, solicited=False, invalidate_stag=None) */
static PyObject *qb_send_now(QueuePairBase *self, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames)
{
    PyObject *names[] = {s_data, s_solicited, s_invalidate_stag};
    PyObject *got[] = {NULL, Py_False, Py_None};
    if (!qb_args("send_now", args, nargsf, kwnames, names, 3, 1, got))
        return NULL;
    PyObject *fast = self->fast;
    if (qb_is_set(fast) && got[2] == Py_None) {
        int solicited = PyObject_IsTrue(got[1]);
        if (solicited < 0)
            return NULL;
        PyObject *frame;
        if (iw_is_fastpath(fast))
            frame = iw_fastpath_send(fast, got[0], solicited);
        else
            frame = PyObject_CallMethodObjArgs(fast, s_send, got[0], got[1], NULL);
        if (frame == NULL || frame != Py_None)
            return frame;
        Py_DECREF(frame);
    }
    PyObject *call[] = {(PyObject *)self, got[0], got[1], got[2]};
    return PyObject_VectorcallMethod(s_send_slow, call, 4, NULL);
}

/* A FastPath's receive, or any other object's `receive` method and its
 * `octets` and `rest` attributes (a twin set by a test). */
static PyObject *qb_fast_receive(PyObject *fast, PyObject *data, Py_ssize_t *octets,
                                 Py_ssize_t *rest)
{
    if (iw_is_fastpath(fast))
        return iw_fastpath_receive(fast, data, octets, rest);
    PyObject *done = PyObject_CallMethodOneArg(fast, s_receive, data);
    if (done == NULL || done == Py_None)
        return done;
    PyObject *n = PyObject_GetAttr(fast, s_octets);
    PyObject *r = n == NULL ? NULL : PyObject_GetAttr(fast, s_rest);
    *octets = n == NULL ? -1 : PyLong_AsSsize_t(n);
    *rest = r == NULL ? -1 : PyLong_AsSsize_t(r);
    Py_XDECREF(n);
    Py_XDECREF(r);
    if (PyErr_Occurred()) {
        Py_DECREF(done);
        return NULL;
    }
    return done;
}

/* receive_data(data, now) */
static PyObject *qb_receive_data(QueuePairBase *self, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    PyObject *names[] = {s_data, s_now};
    PyObject *got[] = {NULL, NULL};
    if (!qb_args("receive_data", args, nargsf, kwnames, names, 2, 2, got))
        return NULL;
    PyObject *done = Py_None;
    if (qb_is_set(self->fast)) {
        Py_ssize_t octets = 0, rest = 0;
        done = qb_fast_receive(self->fast, got[0], &octets, &rest);
        if (done == NULL)
            return NULL;
        if (done != Py_None) {
            self->message_octets += octets;
            if (rest == 0)
                return done;
        }
    } else {
        Py_INCREF(done);
    }
    PyObject *call[] = {(PyObject *)self, got[0], got[1], done};
    PyObject *events = PyObject_VectorcallMethod(s_receive_slow, call, 4, NULL);
    Py_DECREF(done);
    return events;
}

/* take_message() */
static PyObject *qb_take_message(QueuePairBase *self, PyObject *unused)
{
    (void)unused;
    PyObject *messages = self->messages;
    if (!qb_is_set(messages))
        return Py_NewRef(Py_None);
    Py_ssize_t queued = PyObject_Size(messages);
    if (queued <= 0)
        return queued < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *data = PyObject_CallMethodNoArgs(messages, s_popleft);
    if (data == NULL)
        return NULL;
    Py_ssize_t length = PyBytes_Check(data) ? PyBytes_GET_SIZE(data) : PyObject_Size(data);
    if (length < 0) {
        Py_DECREF(data);
        return NULL;
    }
    self->message_octets -= length;
    return data;
}

/* settled(): true while the fast path runs on cores that were settled when
 * it began (nothing but its own calls moves them meanwhile), else the
 * subclass's answer. */
static PyObject *qb_settled(QueuePairBase *self, PyObject *unused)
{
    (void)unused;
    if (qb_is_set(self->fast) && self->settled_fast)
        return Py_NewRef(Py_True);
    return PyObject_CallMethodNoArgs((PyObject *)self, s_settled_slow);
}

static int qb_traverse(QueuePairBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fast);
    Py_VISIT(self->messages);
    return 0;
}

static int qb_clear(QueuePairBase *self)
{
    Py_CLEAR(self->fast);
    Py_CLEAR(self->messages);
    return 0;
}

static void qb_dealloc(QueuePairBase *self)
{
    PyObject_GC_UnTrack(self);
    qb_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef qb_methods[] = {
    {"send_now", (PyCFunction)(void (*)(void))qb_send_now, METH_FASTCALL | METH_KEYWORDS,
     "send_now($self, data, *, solicited=False, invalidate_stag=None)\n--\n\n"
     "The FPDU of a Send framed now, or None (iwarp.rdma.qpbase)."},
    {"receive_data", (PyCFunction)(void (*)(void))qb_receive_data,
     METH_FASTCALL | METH_KEYWORDS,
     "receive_data($self, data, now)\n--\n\nThe events of an input (iwarp.rdma.qpbase)."},
    {"take_message", (PyCFunction)qb_take_message, METH_NOARGS,
     "take_message($self)\n--\n\nThe oldest message received, or None."},
    {"settled", (PyCFunction)qb_settled, METH_NOARGS,
     "settled($self)\n--\n\nNo output, no timer, no close required."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef qb_members[] = {
    {"_fast", T_OBJECT, offsetof(QueuePairBase, fast), 0, "The fast path while it runs."},
    {"_messages", T_OBJECT, offsetof(QueuePairBase, messages), 0, "The message queue."},
    {"message_octets", T_PYSSIZET, offsetof(QueuePairBase, message_octets), 0,
     "Octets of received messages not taken yet."},
    {"_settled_fast", T_BOOL, offsetof(QueuePairBase, settled_fast), 0,
     "The cores were settled when the fast path began."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject QueuePairBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "iwarp._speedups.QueuePairBase",
    .tp_basicsize = sizeof(QueuePairBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A queue pair's per-message calls (iwarp.rdma.qpbase).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)qb_dealloc,
    .tp_traverse = (traverseproc)qb_traverse,
    .tp_clear = (inquiry)qb_clear,
    .tp_methods = qb_methods,
    .tp_members = qb_members,
};

static int qb_intern(void)
{
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_data, "data"},
        {&s_now, "now"},
        {&s_solicited, "solicited"},
        {&s_invalidate_stag, "invalidate_stag"},
        {&s_send_slow, "_send_slow"},
        {&s_receive_slow, "_receive_slow"},
        {&s_settled_slow, "_settled_slow"},
        {&s_popleft, "popleft"},
        {&s_send, "send"},
        {&s_receive, "receive"},
        {&s_octets, "octets"},
        {&s_rest, "rest"},
    };
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        if (*names[k].slot == NULL && (*names[k].slot = PyUnicode_InternFromString(names[k].text)) == NULL)
            return 0;
    }
    return 1;
}

int iw_qpbase_add(PyObject *module)
{
    if (!qb_intern() || PyType_Ready(&QueuePairBaseType) < 0)
        return -1;
    Py_INCREF(&QueuePairBaseType);
    if (PyModule_AddObject(module, "QueuePairBase", (PyObject *)&QueuePairBaseType) < 0) {
        Py_DECREF(&QueuePairBaseType);
        return -1;
    }
    return 0;
}
