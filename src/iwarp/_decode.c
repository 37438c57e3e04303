/*
 * iwarp._speedups, the capture analyzer's loops: capture records down to
 * TCP segments, and one FPDU taken apart.
 *
 * Optional, as the rest of the module: each function has a pure-Python
 * twin of the same name and signature in iwarp/_decode.py, whose
 * docstrings are the contract of both; tests assert both give the same
 * results (tests/analyze/test_decode_twin.py). These functions only walk buffers; every
 * decision (connections, reassembly, framing, errors) stays in Python.
 *
 *   pcap_batch(...)    the complete records of a pcap buffer, each decoded
 *                      down to a TcpPacket when it is the common case
 *                      (Ethernet/VLAN, cooked, raw or loopback link, IPv4
 *                      without fragments, TCP); any other frame comes back
 *                      as (linktype, time, data) for Python to decode
 *                      (capture.py _decode).
 *   pcapng_batch(...)  the same for a pcapng buffer's Enhanced Packet Blocks.
 *   tcp_packet(...)    one frame the same way (pcapng's other packet blocks).
 *   fpdu_view(...)     the FPDU at an offset of a buffer: ULPDU, PAD, CRC
 *                      field and computed CRC, markers (mpa.py inspect_fpdu),
 *                      and the DDP/RDMAP fields of its ULPDU when they are
 *                      plain (rdmap/wire.py describe_ulpdu: Writes, Sends,
 *                      Read Responses without problems; describe_table
 *                      says which opcodes).
 *   fpdu_walk(...)     the clean FPDUs in a row from an offset, each as
 *                      fpdu_view takes it apart (without the ULPDU's octets):
 *                      those the walk (mpa.py FpduWalker) records with no
 *                      error or note; it stops at any other.
 *   fpdu_count(...)    how many FPDUs fpdu_walk would take, and where it
 *                      stops, with no object made per FPDU (the proxy's
 *                      count of what it forwards unprinted).
 *   fpdu_json(...)     the --json line of an FPDU record when its values are
 *                      of the usual kinds (records.py _fpdu_line; json_table
 *                      says which record types and ULPDU keys).
 *   new_record(...)    a record (a frozen slots dataclass) with its fields
 *                      set, as its __init__ sets them, in one call
 *                      (records.py record_maker).
 *
 * Bounds are compared as "size > len - at", never "at + size > len"; every
 * multi-octet field is read octet by octet (no unaligned word reads).
 */
#include "_speedups.h"
#include "_wire.h"

#include <limits.h>
#include <string.h>

#define LINKTYPE_NULL 0
#define LINKTYPE_ETHERNET 1
#define LINKTYPE_RAW 101
#define LINKTYPE_LINUX_SLL 113
#define LINKTYPE_IPV4 228
#define LINKTYPE_IPV6 229
#define LINKTYPE_LINUX_SLL2 276

#define ETHERTYPE_IPV4 0x0800
#define IPPROTO_TCP_ 6
#define TCP_FIELDS 11
/* Dotted addresses remembered (a dict the caller owns); cleared past it. */
#define ADDRESS_CACHE 4096
/* Most records decoded per call (bounds the list handed back). */
#define BATCH_MAX 65536


/* What one frame holds, when it is a plain IPv4 TCP segment. */
typedef struct {
    uint32_t src, dst, seq, ack;
    uint32_t sport, dport, flags;
    Py_ssize_t payload_at, payload_len, wire_length;
} segment;

/* The network header of a frame (capture.py _link): 1 with its ethertype
 * and offset, 0 when Python is to decide. */
static int link_layer(const uint8_t *d, Py_ssize_t n, long linktype, uint32_t *ethertype,
                      Py_ssize_t *offset)
{
    switch (linktype) {
    case LINKTYPE_ETHERNET: {
        Py_ssize_t at = 12;
        while (n >= 2 && at <= n - 2) {
            uint32_t type = iw_be16(d + at);
            if (type != 0x8100 && type != 0x88A8 && type != 0x9100) {
                *ethertype = type;
                *offset = at + 2;
                return 1;
            }
            at += 4;
        }
        return 0;
    }
    case LINKTYPE_LINUX_SLL:
        if (n < 16)
            return 0;
        *ethertype = iw_be16(d + 14);
        *offset = 16;
        return 1;
    case LINKTYPE_LINUX_SLL2:
        if (n < 20)
            return 0;
        *ethertype = iw_be16(d);
        *offset = 20;
        return 1;
    case 12:
    case 14:
    case LINKTYPE_RAW:
        if (n < 1 || d[0] >> 4 != 4)
            return 0;
        *ethertype = ETHERTYPE_IPV4;
        *offset = 0;
        return 1;
    case LINKTYPE_IPV4:
        *ethertype = ETHERTYPE_IPV4;
        *offset = 0;
        return 1;
    case LINKTYPE_NULL: {
        if (n < 4)
            return 0;
        uint32_t family = iw_le32(d);
        if (family > 0xFFFF)
            family = iw_be32(d);
        if (family != 2)
            return 0;
        *ethertype = ETHERTYPE_IPV4;
        *offset = 4;
        return 1;
    }
    default:
        return 0;
    }
}

/* capture.py _decode for the common case: 1 and *s filled for an IPv4 TCP
 * segment without fragmentation; 0 for everything else (Python decides,
 * and counts fragments and skipped frames). */
static int decode_frame(const uint8_t *d, Py_ssize_t n, long linktype, segment *s)
{
    uint32_t ethertype;
    Py_ssize_t at;
    if (!link_layer(d, n, linktype, &ethertype, &at) || ethertype != ETHERTYPE_IPV4)
        return 0;
    if (20 > n - at)
        return 0;
    const uint8_t *ip = d + at;
    uint32_t version_ihl = ip[0];
    if (version_ihl >> 4 != 4 || ip[9] != IPPROTO_TCP_)
        return 0;
    if (iw_be16(ip + 6) & 0x3FFF) /* a fragment: counted by Python */
        return 0;
    if ((version_ihl & 0x0F) < 5)
        return 0;
    Py_ssize_t start = at + (Py_ssize_t)(version_ihl & 0x0F) * 4;
    uint32_t total = iw_be16(ip + 2);
    /* The IP length, not the frame length: Ethernet pads short frames. */
    Py_ssize_t end = total ? at + (Py_ssize_t)total : n;
    if (end - start < 20 || start > n - 20)
        return 0;
    const uint8_t *tcp = d + start;
    Py_ssize_t header = (Py_ssize_t)(tcp[12] >> 4) * 4;
    if (header < 20)
        return 0;
    Py_ssize_t payload_start = start + header;
    s->src = iw_be32(ip + 12);
    s->dst = iw_be32(ip + 16);
    s->sport = iw_be16(tcp);
    s->dport = iw_be16(tcp + 2);
    s->seq = iw_be32(tcp + 4);
    s->ack = iw_be32(tcp + 8);
    s->flags = tcp[13];
    s->wire_length = end > payload_start ? end - payload_start : 0;
    /* A capture cut short (snaplen) holds less than the IP length says. */
    Py_ssize_t stop = end < n ? end : n;
    s->payload_at = payload_start;
    s->payload_len = payload_start < n && stop > payload_start ? stop - payload_start : 0;
    return 1;
}

/* The dotted form of an address, as str(IPv4Address) gives it, remembered. */
static PyObject *dotted(PyObject *cache, uint32_t address)
{
    PyObject *key = PyLong_FromUnsignedLong(address);
    if (key == NULL)
        return NULL;
    PyObject *found = PyDict_GetItemWithError(cache, key);
    if (found != NULL) {
        Py_DECREF(key);
        Py_INCREF(found);
        return found;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *text = PyUnicode_FromFormat("%u.%u.%u.%u", (unsigned)(address >> 24),
                                          (unsigned)((address >> 16) & 0xFF),
                                          (unsigned)((address >> 8) & 0xFF),
                                          (unsigned)(address & 0xFF));
    if (text == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    if (PyDict_GET_SIZE(cache) >= ADDRESS_CACHE)
        PyDict_Clear(cache);
    int failed = PyDict_SetItem(cache, key, text);
    Py_DECREF(key);
    if (failed < 0) {
        Py_DECREF(text);
        return NULL;
    }
    return text;
}

/* A TcpPacket (a tuple subclass of 11 fields) for the segment. */
static PyObject *make_packet(PyTypeObject *cls, PyObject *cache, long long frame, double time,
                             const uint8_t *d, const segment *s)
{
    PyObject *fields[TCP_FIELDS];
    fields[0] = PyLong_FromLongLong(frame);
    fields[1] = PyFloat_FromDouble(time);
    fields[2] = dotted(cache, s->src);
    fields[3] = PyLong_FromUnsignedLong(s->sport);
    fields[4] = dotted(cache, s->dst);
    fields[5] = PyLong_FromUnsignedLong(s->dport);
    fields[6] = PyLong_FromUnsignedLong(s->seq);
    fields[7] = PyLong_FromUnsignedLong(s->ack);
    fields[8] = PyLong_FromUnsignedLong(s->flags);
    fields[9] = PyBytes_FromStringAndSize((const char *)d + s->payload_at, s->payload_len);
    fields[10] = PyLong_FromSsize_t(s->wire_length);
    PyObject *packet = NULL;
    int complete = 1;
    for (int i = 0; i < TCP_FIELDS; i++)
        complete &= fields[i] != NULL;
    if (complete)
        packet = cls->tp_alloc(cls, TCP_FIELDS);
    if (packet == NULL) {
        for (int i = 0; i < TCP_FIELDS; i++)
            Py_XDECREF(fields[i]);
        return NULL;
    }
    for (int i = 0; i < TCP_FIELDS; i++)
        PyTuple_SET_ITEM(packet, i, fields[i]);
    return packet;
}

static int check_packet_type(PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) ||
        ((PyTypeObject *)cls)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "cls must be a plain tuple subclass (TcpPacket)");
        return 0;
    }
    return 1;
}

/* One frame: a TcpPacket, or the (linktype, time, data) triple for Python. */
static PyObject *frame_item(PyTypeObject *cls, PyObject *cache, long linktype, long long frame,
                            double time, const uint8_t *d, Py_ssize_t n)
{
    segment s;
    if (decode_frame(d, n, linktype, &s))
        return make_packet(cls, cache, frame, time, d, &s);
    return Py_BuildValue("(ldy#)", linktype, time, (const char *)d, n);
}

/* pcap_batch(buffer, pos, big_endian, resolution, linktype, frame_cap,
 *            frames_before, cls, cache) -> (items, pos)
 *
 * Every complete record of the buffer from pos on whose caplen is at most
 * frame_cap, as items (a TcpPacket numbered from frames_before + 1, or a
 * (linktype, time, data) triple), and the position of the first record
 * not taken: incomplete, longer than frame_cap, or past BATCH_MAX records.
 */
static PyObject *py_pcap_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, frame_cap;
    int big;
    double resolution;
    long linktype;
    long long frames;
    PyObject *cls, *cache;
    if (!PyArg_ParseTuple(args, "y*npdlnLOO!:pcap_batch", &view, &pos, &big, &resolution,
                          &linktype, &frame_cap, &frames, &cls, &PyDict_Type, &cache))
        return NULL;
    PyObject *items = NULL;
    if (!check_packet_type(cls))
        goto done;
    if (pos < 0 || pos > view.len || frame_cap < 0 || frames < 0 ||
        frames > LLONG_MAX - BATCH_MAX) {
        PyErr_SetString(PyExc_ValueError, "pos, frame_cap or frames_before out of range");
        goto done;
    }
    items = PyList_New(0);
    if (items == NULL)
        goto done;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t len = view.len;
    for (int count = 0; count < BATCH_MAX && 16 <= len - pos; count++) {
        const uint8_t *h = buf + pos;
        uint32_t seconds = big ? iw_be32(h) : iw_le32(h);
        uint32_t fraction = big ? iw_be32(h + 4) : iw_le32(h + 4);
        uint32_t caplen = big ? iw_be32(h + 8) : iw_le32(h + 8);
        if ((Py_ssize_t)caplen > frame_cap || (Py_ssize_t)caplen > len - pos - 16)
            break;
        double time = (double)seconds + (double)fraction * resolution;
        PyObject *item = frame_item((PyTypeObject *)cls, cache, linktype, ++frames, time, h + 16,
                                    (Py_ssize_t)caplen);
        if (item == NULL || PyList_Append(items, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(items);
            goto done;
        }
        Py_DECREF(item);
        pos += 16 + (Py_ssize_t)caplen;
    }
done:
    PyBuffer_Release(&view);
    if (items == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", items, pos);
}

/* Interfaces a pcapng batch knows at most (more: Python takes the rest). */
#define MAX_INTERFACES 64

/* pcapng_batch(buffer, pos, big_endian, interfaces, frame_cap, block_cap,
 *              frames_before, cls, cache) -> (items, pos)
 *
 * The Enhanced Packet Blocks of a pcapng buffer from pos on, as
 * pcap_batch does for records: interfaces is the section's list of
 * (linktype, time resolution). Stops at the first block that is not a
 * complete, well-formed EPB of a known interface whose frame fits
 * frame_cap (any other block, a bad length, a block longer than
 * block_cap, the end of the buffer): Python takes that one.
 */
static PyObject *py_pcapng_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, frame_cap, block_cap;
    int big;
    long long frames;
    PyObject *interfaces, *cls, *cache;
    if (!PyArg_ParseTuple(args, "y*npO!nnLOO!:pcapng_batch", &view, &pos, &big, &PyList_Type,
                          &interfaces, &frame_cap, &block_cap, &frames, &cls, &PyDict_Type,
                          &cache))
        return NULL;
    PyObject *items = NULL;
    long linktypes[MAX_INTERFACES];
    double resolutions[MAX_INTERFACES];
    Py_ssize_t known = PyList_GET_SIZE(interfaces);
    if (known > MAX_INTERFACES)
        known = MAX_INTERFACES;
    if (!check_packet_type(cls))
        goto done;
    if (pos < 0 || pos > view.len || frame_cap < 0 || block_cap < 0 || frames < 0 ||
        frames > LLONG_MAX - BATCH_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "pos, frame_cap, block_cap or frames_before out of range");
        goto done;
    }
    for (Py_ssize_t i = 0; i < known; i++) {
        PyObject *entry = PyList_GET_ITEM(interfaces, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            PyErr_SetString(PyExc_TypeError, "interfaces are (linktype, resolution) tuples");
            goto done;
        }
        linktypes[i] = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
        resolutions[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(entry, 1));
        if (PyErr_Occurred())
            goto done;
    }
    items = PyList_New(0);
    if (items == NULL)
        goto done;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t len = view.len;
    for (int count = 0; count < BATCH_MAX && 8 <= len - pos; count++) {
        const uint8_t *h = buf + pos;
        uint32_t type = big ? iw_be32(h) : iw_le32(h);
        uint32_t length = big ? iw_be32(h + 4) : iw_le32(h + 4);
        if (type != 6 || length < 32 || length % 4 || (Py_ssize_t)(length - 12) > block_cap ||
            (Py_ssize_t)length > len - pos)
            break;
        const uint8_t *body = h + 8;
        Py_ssize_t body_len = (Py_ssize_t)length - 12;
        uint32_t iface = big ? iw_be32(body) : iw_le32(body);
        uint32_t high = big ? iw_be32(body + 4) : iw_le32(body + 4);
        uint32_t low = big ? iw_be32(body + 8) : iw_le32(body + 8);
        uint32_t caplen = big ? iw_be32(body + 12) : iw_le32(body + 12);
        if ((Py_ssize_t)iface >= known || (Py_ssize_t)caplen > frame_cap)
            break;
        Py_ssize_t n = (Py_ssize_t)caplen < body_len - 20 ? (Py_ssize_t)caplen : body_len - 20;
        double time = (double)(((uint64_t)high << 32) | low) * resolutions[iface];
        PyObject *item = frame_item((PyTypeObject *)cls, cache, linktypes[iface], ++frames, time,
                                    body + 20, n);
        if (item == NULL || PyList_Append(items, item) < 0) {
            Py_XDECREF(item);
            Py_CLEAR(items);
            goto done;
        }
        Py_DECREF(item);
        pos += (Py_ssize_t)length;
    }
done:
    PyBuffer_Release(&view);
    if (items == NULL)
        return NULL;
    return Py_BuildValue("(Nn)", items, pos);
}

/* tcp_packet(frame, linktype, time, data, cls, cache) -> TcpPacket | None */
static PyObject *py_tcp_packet(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long frame;
    long linktype;
    double time;
    PyObject *cls, *cache;
    if (!PyArg_ParseTuple(args, "Lldy*OO!:tcp_packet", &frame, &linktype, &time, &view, &cls,
                          &PyDict_Type, &cache))
        return NULL;
    PyObject *out = NULL;
    segment s;
    if (check_packet_type(cls)) {
        if (decode_frame((const uint8_t *)view.buf, view.len, linktype, &s))
            out = make_packet((PyTypeObject *)cls, cache, frame, time,
                              (const uint8_t *)view.buf, &s);
        else
            out = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&view);
    return out;
}

/* --- DDP/RDMAP headers of a ULPDU (rdmap/wire.py describe_ulpdu) -------- */

enum { K_LENGTH, K_PROBLEMS, K_TAGGED, K_LAST, K_DDP_VERSION, K_DDP_RESERVED, K_RDMAP_VERSION,
       K_RDMAP_RESERVED, K_OPCODE, K_OPCODE_NAME, K_STAG, K_TO, K_INV_STAG, K_QN, K_MSN, K_MO,
       K_PAYLOAD_OFFSET, K_PAYLOAD_LENGTH, K_COUNT };
static const char *const key_names[K_COUNT] = {
    "length", "problems", "tagged", "last", "ddp_version", "ddp_reserved", "rdmap_version",
    "rdmap_reserved", "opcode", "opcode_name", "stag", "to", "inv_stag", "qn", "msn", "mo",
    "payload_offset", "payload_length"};
static PyObject *keys[K_COUNT];
/* Per opcode (0-15): its name (NULL: Python describes it), the T bit it
 * must come with and the queue it must use (-1: any). */
static PyObject *opcode_names[16];
static int opcode_tagged[16], opcode_queue[16];
static int table_ready = 0;

/* describe_table(names, tagged, queue): the opcodes this file describes
 * (name, or None for Python), with their T bit and queue (-1: any). */
static PyObject *py_describe_table(PyObject *self, PyObject *args)
{
    PyObject *names, *tagged, *queue;
    if (!PyArg_ParseTuple(args, "O!O!O!:describe_table", &PyTuple_Type, &names, &PyTuple_Type,
                          &tagged, &PyTuple_Type, &queue))
        return NULL;
    if (PyTuple_GET_SIZE(names) != 16 || PyTuple_GET_SIZE(tagged) != 16 ||
        PyTuple_GET_SIZE(queue) != 16) {
        PyErr_SetString(PyExc_ValueError, "one entry per opcode (16) in each table");
        return NULL;
    }
    int t[16], q[16];
    for (int i = 0; i < 16; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (name != Py_None && !PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "opcode names are str or None");
            return NULL;
        }
        long tv = PyLong_AsLong(PyTuple_GET_ITEM(tagged, i));
        long qv = PyLong_AsLong(PyTuple_GET_ITEM(queue, i));
        if (PyErr_Occurred())
            return NULL;
        t[i] = (int)tv;
        q[i] = (int)qv;
    }
    for (int k = 0; k < K_COUNT; k++) {
        if (keys[k] == NULL && (keys[k] = PyUnicode_InternFromString(key_names[k])) == NULL)
            return NULL;
    }
    for (int i = 0; i < 16; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        Py_XSETREF(opcode_names[i], name == Py_None ? NULL : Py_NewRef(name));
        opcode_tagged[i] = t[i];
        opcode_queue[i] = q[i];
    }
    table_ready = 1;
    Py_RETURN_NONE;
}

static int put(PyObject *d, int key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int r = PyDict_SetItem(d, keys[key], value);
    Py_DECREF(value);
    return r;
}

/* The size of a ULPDU's DDP/RDMAP header (14 tagged, 18 untagged) when
 * it is plain: an opcode the table names, with the T bit and queue that
 * opcode must use, DDP version 1 and RDMAP version 0 or 1, and the whole
 * header there; else 0 (Python describes it). Reads no further than
 * that header. What describe makes a dict of, and fpdu_count counts. */
static Py_ssize_t plain_header(const uint8_t *u, Py_ssize_t n)
{
    if (!table_ready || n < 2)
        return 0;
    uint32_t control = u[0], rdmap = u[1];
    int tagged = (control & 0x80) != 0;
    uint32_t opcode = rdmap & 0x0F;
    if (opcode_names[opcode] == NULL || (control & 0x03) != 1 || rdmap >> 6 > 1)
        return 0;
    if (opcode_tagged[opcode] >= 0 && opcode_tagged[opcode] != tagged)
        return 0;
    Py_ssize_t header = tagged ? 14 : 18;
    if (n < header)
        return 0;
    if (!tagged && opcode_queue[opcode] >= 0 && (uint32_t)opcode_queue[opcode] != iw_be32(u + 6))
        return 0;
    return header;
}

/* The describe_ulpdu dict of a ULPDU without problems whose opcode the
 * table names; NULL with no exception set when Python is to describe it. */
static PyObject *describe(const uint8_t *u, Py_ssize_t n)
{
    Py_ssize_t header = plain_header(u, n);
    if (header == 0)
        return NULL;
    uint32_t control = u[0], rdmap = u[1];
    int tagged = (control & 0x80) != 0;
    uint32_t version = rdmap >> 6, opcode = rdmap & 0x0F;
    PyObject *name = opcode_names[opcode];
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    int bad = put(d, K_LENGTH, PyLong_FromSsize_t(n)) < 0 || put(d, K_PROBLEMS, PyList_New(0)) < 0 ||
              put(d, K_TAGGED, PyBool_FromLong(tagged)) < 0 ||
              put(d, K_LAST, PyBool_FromLong((control & 0x40) != 0)) < 0 ||
              put(d, K_DDP_VERSION, PyLong_FromLong(control & 0x03)) < 0 ||
              put(d, K_DDP_RESERVED, PyLong_FromLong((control & 0x3C) >> 2)) < 0 ||
              put(d, K_RDMAP_VERSION, PyLong_FromLong(version)) < 0 ||
              put(d, K_RDMAP_RESERVED, PyLong_FromLong((rdmap & 0x30) >> 4)) < 0 ||
              put(d, K_OPCODE, PyLong_FromLong(opcode)) < 0 ||
              put(d, K_OPCODE_NAME, Py_NewRef(name)) < 0;
    if (!bad && tagged) {
        uint64_t to = ((uint64_t)iw_be32(u + 6) << 32) | iw_be32(u + 10);
        bad = put(d, K_STAG, PyLong_FromUnsignedLong(iw_be32(u + 2))) < 0 ||
              put(d, K_TO, PyLong_FromUnsignedLongLong(to)) < 0;
    } else if (!bad) {
        bad = put(d, K_INV_STAG, PyLong_FromUnsignedLong(iw_be32(u + 2))) < 0 ||
              put(d, K_QN, PyLong_FromUnsignedLong(iw_be32(u + 6))) < 0 ||
              put(d, K_MSN, PyLong_FromUnsignedLong(iw_be32(u + 10))) < 0 ||
              put(d, K_MO, PyLong_FromUnsignedLong(iw_be32(u + 14))) < 0;
    }
    if (!bad)
        bad = put(d, K_PAYLOAD_OFFSET, PyLong_FromSsize_t(header)) < 0 ||
              put(d, K_PAYLOAD_LENGTH, PyLong_FromSsize_t(n - header)) < 0;
    if (bad) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* describe(ulpdu) -> dict | None, for the tests. */
static PyObject *py_describe_ulpdu(PyObject *self, PyObject *args)
{
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:describe_ulpdu", &view))
        return NULL;
    PyObject *out = describe((const uint8_t *)view.buf, view.len);
    PyBuffer_Release(&view);
    if (out == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
}

/* mpa/framing.py fpdu_wire_size: header, ULPDU, PAD to 4 and CRC, plus the
 * markers that fall inside from the phase on (a leading one included). */
static Py_ssize_t fpdu_wire(Py_ssize_t length, unsigned int phase, int markers)
{
    return (Py_ssize_t)iw_frame((size_t)length, phase, markers).wire;
}

/* A marker phase argument, read as a Py_ssize_t (the "I" format would take
 * any int modulo 2**32): out of range, IW_MARKER_INTERVAL, which the
 * callers refuse. */
static unsigned int phase_of(Py_ssize_t phase)
{
    return phase >= 0 && phase < IW_MARKER_INTERVAL ? (unsigned int)phase : IW_MARKER_INTERVAL;
}

/* fpdu_view(chunk, at, phase, markers, either_fpduptr, ddp)
 *     -> (wire_length, ulpdu, pad, crc, crc_expected, markers, ulp) | None
 *
 * The FPDU whose first octet is chunk[at], at marker phase ``phase``
 * (offset from the last marker position, 0..511), taken apart as mpa.py's
 * inspect_fpdu does: markers (offset in the FPDU, reserved, fpduptr,
 * expected) listed and cut out, CRC-32C computed over everything before
 * the CRC field; with ddp, ulp is the describe_ulpdu dict of the ULPDU
 * when this file can make it (else None: Python describes it). None when
 * the chunk ends before the FPDU does (the caller looks at where).
 */
static PyObject *py_fpdu_view(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t at;
    Py_ssize_t phase_arg;
    int markers, either, ddp;
    if (!PyArg_ParseTuple(args, "y*nnppp:fpdu_view", &view, &at, &phase_arg, &markers, &either,
                          &ddp))
        return NULL;
    unsigned int phase = phase_of(phase_arg);
    PyObject *out = NULL;
    const uint8_t *d = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len;
    if (at < 0 || at > n || phase >= IW_MARKER_INTERVAL) {
        PyErr_SetString(PyExc_ValueError, "at or phase out of range");
        goto done;
    }
    Py_ssize_t lead = markers && phase == 0 ? IW_MARKER_SIZE : 0;
    if (lead + IW_LENGTH_SIZE > n - at) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t length = (Py_ssize_t)iw_be16(d + at + lead);
    Py_ssize_t wire = fpdu_wire(length, phase, markers);
    if (wire > n - at) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    const uint8_t *f = d + at;
    Py_ssize_t body = wire - IW_CRC_SIZE;
    uint32_t crc_expected = ~iw_crc32c(0xFFFFFFFFu, f, (size_t)body);
    uint32_t crc = iw_le32(f + body);
    PyObject *list = NULL, *ulpdu = NULL, *pad = NULL;
    if (!markers) {
        ulpdu = PyBytes_FromStringAndSize((const char *)f + IW_LENGTH_SIZE, length);
        pad = PyBytes_FromStringAndSize((const char *)f + IW_LENGTH_SIZE + length,
                                        body - IW_LENGTH_SIZE - length);
        list = PyTuple_New(0);
    } else {
        /* Cut the markers out: the content is at most 64 KiB + 2. */
        PyObject *kept = PyBytes_FromStringAndSize(NULL, body);
        list = PyList_New(0);
        if (kept == NULL || list == NULL) {
            Py_XDECREF(kept);
            Py_XDECREF(list);
            goto done;
        }
        char *k = PyBytes_AS_STRING(kept);
        Py_ssize_t cursor = 0, filled = 0;
        Py_ssize_t m = phase == 0 ? 0 : IW_MARKER_INTERVAL - (Py_ssize_t)phase;
        for (; m < body; m += IW_MARKER_INTERVAL) {
            if (IW_MARKER_SIZE > body - m) { /* never with a consistent size */
                Py_DECREF(kept);
                Py_DECREF(list);
                PyErr_SetString(PyExc_RuntimeError, "a marker splits the CRC");
                goto done;
            }
            uint32_t reserved = iw_be16(f + m);
            uint32_t pointer = iw_be16(f + m + 2);
            Py_ssize_t expected = m == 0 ? 0 : m - lead;
            if (lead && m && either && (Py_ssize_t)(pointer & IW_FPDUPTR_MASK) == m)
                expected = m; /* seeds 000/002: from the FPDU's first octet */
            PyObject *entry = Py_BuildValue("(nIIn)", m, reserved, pointer, expected);
            if (entry == NULL || PyList_Append(list, entry) < 0) {
                Py_XDECREF(entry);
                Py_DECREF(kept);
                Py_DECREF(list);
                goto done;
            }
            Py_DECREF(entry);
            memcpy(k + filled, f + cursor, (size_t)(m - cursor));
            filled += m - cursor;
            cursor = m + IW_MARKER_SIZE;
        }
        memcpy(k + filled, f + cursor, (size_t)(body - cursor));
        filled += body - cursor;
        Py_ssize_t pad_len = filled - IW_LENGTH_SIZE - length;
        if (pad_len < 0) { /* cannot happen with a consistent size; be safe */
            Py_DECREF(kept);
            Py_DECREF(list);
            PyErr_SetString(PyExc_RuntimeError, "inconsistent FPDU size");
            goto done;
        }
        ulpdu = PyBytes_FromStringAndSize(k + IW_LENGTH_SIZE, length);
        pad = PyBytes_FromStringAndSize(k + IW_LENGTH_SIZE + length, pad_len);
        Py_DECREF(kept);
        PyObject *tuple = list == NULL ? NULL : PyList_AsTuple(list);
        Py_XDECREF(list);
        list = tuple;
    }
    if (ulpdu == NULL || pad == NULL || list == NULL) {
        Py_XDECREF(ulpdu);
        Py_XDECREF(pad);
        Py_XDECREF(list);
        goto done;
    }
    PyObject *ulp = ddp ? describe((const uint8_t *)PyBytes_AS_STRING(ulpdu), length) : NULL;
    if (ulp == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(ulpdu);
            Py_DECREF(pad);
            Py_DECREF(list);
            goto done;
        }
        ulp = Py_NewRef(Py_None);
    }
    out = Py_BuildValue("(nNNkkNN)", wire, ulpdu, pad, (unsigned long)crc,
                        (unsigned long)crc_expected, list, ulp);
done:
    PyBuffer_Release(&view);
    return out;
}

/* --- clean FPDUs in a row (mpa.py FpduWalker) --------------------------- */

/* Most FPDUs the walk of fpdu_walk hands back in one call. */
#define WALK_MAX 4096

/* An FPDU with markers, taken apart for fpdu_walk: its content's first
 * octets (the ULPDU's header) and PAD copied out around the markers, each
 * marker checked (Reserved zero, FPDUPTR exactly as expected). */
typedef struct {
    const uint8_t *f;     /* the FPDU's first octet */
    Py_ssize_t body;      /* its octets before the CRC field */
    Py_ssize_t lead;      /* a marker first: 4 */
    Py_ssize_t length;    /* ULPDU_Length */
    unsigned int phase;   /* of f[0] */
    int either;           /* FPDUPTRs may count from a leading marker */
    uint8_t *head;        /* gets the ULPDU's first want_head octets */
    Py_ssize_t want_head;
    uint8_t *pad;         /* gets the PAD (at most 3 octets) */
    Py_ssize_t got_pad;   /* how many */
} WalkParts;

/* 1 and *marks (a tuple of the markers' entries) when every marker is
 * right and the PAD is in place; 0 when not (the analyzer takes it apart);
 * -1 with an error set. */
static int walk_marked(WalkParts *w, PyObject **marks)
{
    const uint8_t *f = w->f;
    Py_ssize_t body = w->body, lead = w->lead, want_head = w->want_head;
    Py_ssize_t pad_at = IW_LENGTH_SIZE + w->length;
    PyObject *entries = PyList_New(0);
    if (entries == NULL)
        return -1;
    int clean = 1;
    Py_ssize_t cursor = 0, filled = 0; /* content octets so far */
    Py_ssize_t m = w->phase == 0 ? 0 : IW_MARKER_INTERVAL - (Py_ssize_t)w->phase;
    for (;; m += IW_MARKER_INTERVAL) {
        Py_ssize_t stop = m < body ? m : body;
        /* Content octets [filled, filled + stop - cursor) lie at f[cursor..stop). */
        Py_ssize_t span = stop - cursor;
        if (span > 0) {
            Py_ssize_t lo = filled, hi = filled + span;
            /* ULPDU header: content [2, 2 + want_head). */
            Py_ssize_t a = lo > IW_LENGTH_SIZE ? lo : IW_LENGTH_SIZE;
            Py_ssize_t b = hi < IW_LENGTH_SIZE + want_head ? hi : IW_LENGTH_SIZE + want_head;
            if (a < b)
                memcpy(w->head + (a - IW_LENGTH_SIZE), f + cursor + (a - lo), (size_t)(b - a));
            /* PAD: content [pad_at, ...). */
            a = lo > pad_at ? lo : pad_at;
            if (a < hi) {
                if (hi - pad_at > 3) { /* cannot happen with a consistent size */
                    clean = 0;
                    break;
                }
                memcpy(w->pad + (a - pad_at), f + cursor + (a - lo), (size_t)(hi - a));
            }
            filled = hi;
        }
        if (m >= body)
            break;
        if (IW_MARKER_SIZE > body - m) { /* never on the 4-octet grid */
            clean = 0;
            break;
        }
        uint32_t reserved = iw_be16(f + m);
        uint32_t pointer = iw_be16(f + m + 2);
        Py_ssize_t expected = m == 0 ? 0 : m - lead;
        if (lead && m && w->either && (Py_ssize_t)(pointer & IW_FPDUPTR_MASK) == m)
            expected = m; /* seeds 000/002: from the FPDU's first octet */
        if (reserved != 0 || (Py_ssize_t)pointer != expected) {
            clean = 0;
            break;
        }
        PyObject *entry = Py_BuildValue("(nIIn)", m, reserved, pointer, expected);
        if (entry == NULL || PyList_Append(entries, entry) < 0) {
            Py_XDECREF(entry);
            Py_DECREF(entries);
            return -1;
        }
        Py_DECREF(entry);
        cursor = m + IW_MARKER_SIZE;
    }
    w->got_pad = filled - pad_at;
    if (!clean || w->got_pad < 0 || w->got_pad > 3) {
        Py_DECREF(entries);
        return 0;
    }
    *marks = PyList_AsTuple(entries);
    Py_DECREF(entries);
    return *marks == NULL ? -1 : 1;
}

/* fpdu_walk(chunk, at, phase, markers, either_fpduptr, ddp, crc, max_ulpdu, count)
 *     -> ([(offset, wire_length, ulpdu_length, pad, crc, crc_expected, markers, ulp), ...],
 *         offset, need)
 *
 * The FPDUs from chunk[at] on, in a row, as fpdu_view takes each apart,
 * while each is whole in the chunk and clean: CRC right (when crc), every
 * marker's Reserved zero and FPDUPTR exactly the expected value, PAD zero,
 * ULPDU_Length at most max_ulpdu, and (with ddp) its ULPDU described here
 * (a plain header). These are the FPDUs the analyzer's walk records with
 * no error or note, and counts as valid; it takes any other FPDU apart
 * itself. At most ``count`` (and WALK_MAX) FPDUs; offsets are the chunk's;
 * ulp is None without ddp. Returns where the walk stopped, and need: the
 * wire size of the FPDU there when the chunk ends before it does (its
 * length field in the chunk), else 0 (stopped for any other reason).
 */
static PyObject *py_fpdu_walk(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t at, max_ulpdu, count;
    Py_ssize_t phase_arg;
    int markers, either, ddp, crc_used;
    if (!PyArg_ParseTuple(args, "y*nnppppnn:fpdu_walk", &view, &at, &phase_arg, &markers, &either,
                          &ddp, &crc_used, &max_ulpdu, &count))
        return NULL;
    unsigned int phase = phase_of(phase_arg);
    PyObject *list = NULL, *out = NULL;
    const uint8_t *d = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len;
    if (at < 0 || at > n || phase >= IW_MARKER_INTERVAL || count < 0) {
        PyErr_SetString(PyExc_ValueError, "at, phase or count out of range");
        goto done;
    }
    if (count > WALK_MAX)
        count = WALK_MAX;
    if ((list = PyList_New(0)) == NULL)
        goto done;
    /* The ULPDU's header and the PAD with the markers cut out. */
    uint8_t head[18 + 8];
    while (PyList_GET_SIZE(list) < count) {
        Py_ssize_t lead = markers && phase == 0 ? IW_MARKER_SIZE : 0;
        if (lead + IW_LENGTH_SIZE > n - at)
            break;
        Py_ssize_t length = (Py_ssize_t)iw_be16(d + at + lead);
        if (length > max_ulpdu)
            break;
        Py_ssize_t wire = fpdu_wire(length, phase, markers);
        if (wire > n - at)
            break;
        const uint8_t *f = d + at;
        Py_ssize_t body = wire - IW_CRC_SIZE;
        uint32_t crc = iw_le32(f + body);
        uint32_t crc_expected = ~iw_crc32c(0xFFFFFFFFu, f, (size_t)body);
        if (crc_used && crc != crc_expected)
            break;
        Py_ssize_t pad_len = body - lead - IW_LENGTH_SIZE - length; /* markers still in */
        PyObject *marks;
        /* The octets of the content (header, ULPDU, PAD) wanted: the ULPDU's
         * first 18 (its DDP/RDMAP header) and the PAD's. */
        Py_ssize_t want_head = length < 18 ? length : 18;
        Py_ssize_t got_pad = 0;
        uint8_t pad[4];
        int clean = 1;
        if (!markers) {
            memcpy(head, f + IW_LENGTH_SIZE, (size_t)want_head);
            if (pad_len < 0 || pad_len > 3)
                break; /* cannot happen with a consistent size */
            memcpy(pad, f + IW_LENGTH_SIZE + length, (size_t)pad_len);
            got_pad = pad_len;
            marks = PyTuple_New(0);
        } else {
            WalkParts parts = {f, body, lead, length, phase, either, head, want_head, pad, 0};
            int clean_marks = walk_marked(&parts, &marks);
            if (clean_marks < 0)
                goto fail;
            if (!clean_marks)
                break;
            got_pad = parts.got_pad;
        }
        if (marks == NULL)
            goto fail;
        for (Py_ssize_t i = 0; i < got_pad; i++)
            clean &= pad[i] == 0;
        PyObject *ulp = NULL;
        if (clean && ddp) {
            /* describe reads no further than the header its n allows (at
             * most 18 octets, all in head). */
            ulp = describe(head, length);
            if (ulp == NULL) {
                Py_DECREF(marks);
                if (PyErr_Occurred())
                    goto fail;
                break; /* not a plain header: the analyzer describes it */
            }
        } else if (clean) {
            ulp = Py_NewRef(Py_None);
        } else {
            Py_DECREF(marks);
            break;
        }
        PyObject *entry = Py_BuildValue("(nnny#kkNN)", at, wire, length, (const char *)pad,
                                        got_pad, (unsigned long)crc, (unsigned long)crc_expected,
                                        marks, ulp);
        if (entry == NULL || PyList_Append(list, entry) < 0) {
            Py_XDECREF(entry);
            goto fail;
        }
        Py_DECREF(entry);
        at += wire;
        phase = (unsigned int)(((Py_ssize_t)phase + wire) & (IW_MARKER_INTERVAL - 1));
    }
    /* Why the walk stopped: the FPDU at ``at`` not whole yet (its wire size
     * when its length field is here), or anything else (0). */
    Py_ssize_t need = 0;
    if (PyList_GET_SIZE(list) < count) {
        Py_ssize_t lead = markers && phase == 0 ? IW_MARKER_SIZE : 0;
        if (lead + IW_LENGTH_SIZE <= n - at) {
            Py_ssize_t wire = fpdu_wire((Py_ssize_t)iw_be16(d + at + lead), phase, markers);
            if (wire > n - at)
                need = wire;
        }
    }
    out = Py_BuildValue("(Nnn)", list, at, need);
    list = NULL;
    goto done;
fail:
    Py_CLEAR(list);
done:
    Py_XDECREF(list);
    PyBuffer_Release(&view);
    return out;
}

/* --- clean FPDUs counted (mpa.py FpduWalker.tally) ----------------------- */

/* The wire size of the FPDU at f (room octets there, at marker phase
 * ``phase``) when it is whole and clean as fpdu_walk takes FPDUs, else 0:
 * ULPDU_Length at most max_ulpdu, every marker's Reserved field zero and
 * its FPDUPTR the expected value, PAD zero, CRC right (when crc_used) and,
 * with ddp, a plain header (plain_header). No object is made: a caller
 * that only counts clean FPDUs (the proxy, when nothing prints them) pays
 * for the CRC and little else. */
static Py_ssize_t clean_fpdu(const uint8_t *f, Py_ssize_t room, unsigned int phase, int markers,
                             int either, int ddp, int crc_used, Py_ssize_t max_ulpdu)
{
    Py_ssize_t lead = markers && phase == 0 ? IW_MARKER_SIZE : 0;
    if (lead + IW_LENGTH_SIZE > room)
        return 0;
    Py_ssize_t length = (Py_ssize_t)iw_be16(f + lead);
    if (length > max_ulpdu)
        return 0;
    Py_ssize_t wire = fpdu_wire(length, phase, markers);
    if (wire > room)
        return 0;
    Py_ssize_t body = wire - IW_CRC_SIZE;
    /* The content (ULPDU_Length, ULPDU, PAD) is the body with its markers
     * cut out: gather the ULPDU's first 18 octets (its DDP/RDMAP header)
     * and the PAD, checking each marker on the way. Without markers the
     * body is one span. */
    uint8_t head[18], pad[3];
    Py_ssize_t want_head = length < 18 ? length : 18, pad_at = IW_LENGTH_SIZE + length;
    Py_ssize_t cursor = 0, filled = 0; /* body octets used, content octets so far */
    Py_ssize_t m = !markers ? body : phase == 0 ? 0 : IW_MARKER_INTERVAL - (Py_ssize_t)phase;
    for (;; m += IW_MARKER_INTERVAL) {
        Py_ssize_t stop = m < body ? m : body;
        if (stop > cursor) {
            /* Content [lo, hi) lies at f[cursor..stop). */
            Py_ssize_t lo = filled, hi = filled + (stop - cursor);
            Py_ssize_t a = lo > IW_LENGTH_SIZE ? lo : IW_LENGTH_SIZE;
            Py_ssize_t b = hi < IW_LENGTH_SIZE + want_head ? hi : IW_LENGTH_SIZE + want_head;
            if (a < b)
                memcpy(head + (a - IW_LENGTH_SIZE), f + cursor + (a - lo), (size_t)(b - a));
            a = lo > pad_at ? lo : pad_at;
            if (a < hi) {
                if (hi - pad_at > 3) /* never with a consistent size */
                    return 0;
                memcpy(pad + (a - pad_at), f + cursor + (a - lo), (size_t)(hi - a));
            }
            filled = hi;
        }
        if (m >= body)
            break;
        if (IW_MARKER_SIZE > body - m) /* never on the 4-octet grid */
            return 0;
        uint32_t reserved = iw_be16(f + m), pointer = iw_be16(f + m + 2);
        Py_ssize_t expected = m == 0 ? 0 : m - lead;
        if (lead && m && either && (Py_ssize_t)(pointer & IW_FPDUPTR_MASK) == m)
            expected = m; /* seeds 000/002: from the FPDU's first octet */
        if (reserved != 0 || (Py_ssize_t)pointer != expected)
            return 0;
        cursor = m + IW_MARKER_SIZE;
    }
    Py_ssize_t got_pad = filled - pad_at;
    if (got_pad < 0 || got_pad > 3)
        return 0;
    for (Py_ssize_t i = 0; i < got_pad; i++)
        if (pad[i] != 0)
            return 0;
    if (ddp && plain_header(head, length) == 0)
        return 0; /* reads at most want_head octets of head: n is length */
    if (crc_used && iw_le32(f + body) != ~iw_crc32c(0xFFFFFFFFu, f, (size_t)body))
        return 0;
    return wire;
}

/* fpdu_count(chunk, at, phase, markers, either_fpduptr, ddp, crc, max_ulpdu, count)
 *     -> (taken, offset, need)
 *
 * fpdu_walk without the objects: how many clean FPDUs lie in a row from
 * chunk[at] (at most ``count``), where they end, and need as fpdu_walk
 * says it. The same FPDUs as fpdu_walk takes (tests/analyze/
 * test_decode_kernels.py holds both to the pure-Python view of each FPDU).
 */
static PyObject *py_fpdu_count(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t at, max_ulpdu, count;
    Py_ssize_t phase_arg;
    int markers, either, ddp, crc_used;
    if (!PyArg_ParseTuple(args, "y*nnppppnn:fpdu_count", &view, &at, &phase_arg, &markers, &either,
                          &ddp, &crc_used, &max_ulpdu, &count))
        return NULL;
    unsigned int phase = phase_of(phase_arg);
    const uint8_t *d = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len, taken = 0;
    if (at < 0 || at > n || phase >= IW_MARKER_INTERVAL || count < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "at, phase or count out of range");
        return NULL;
    }
    while (taken < count) {
        Py_ssize_t wire = clean_fpdu(d + at, n - at, phase, markers, either, ddp, crc_used,
                                     max_ulpdu);
        if (wire == 0)
            break;
        taken++;
        at += wire;
        phase = (unsigned int)(((Py_ssize_t)phase + wire) & (IW_MARKER_INTERVAL - 1));
    }
    Py_ssize_t need = 0;
    if (taken < count) {
        Py_ssize_t lead = markers && phase == 0 ? IW_MARKER_SIZE : 0;
        if (lead + IW_LENGTH_SIZE <= n - at) {
            Py_ssize_t wire = fpdu_wire((Py_ssize_t)iw_be16(d + at + lead), phase, markers);
            if (wire > n - at)
                need = wire;
        }
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnn)", taken, at, need);
}

/* --- JSON lines (analyze/records.py _fpdu_line) ------------------------- */

/* What json_table registers: the record classes and the ULPDU keys written
 * under "ddp" and "rdmap" (records.py _DDP_KEYS, _RDMAP_KEYS), each with its
 * JSON name. */
#define JSON_KEYS_MAX 32
typedef struct {
    Py_ssize_t count;
    PyObject *key[JSON_KEYS_MAX];
    char name[JSON_KEYS_MAX][40]; /* "key": */
    Py_ssize_t name_len[JSON_KEYS_MAX];
} json_keys;
static PyTypeObject *json_fpdu_type, *json_marker_type;
static json_keys json_ddp, json_rdmap;
enum { A_STREAM, A_DIRECTION, A_SEQ, A_FRAME, A_WIRE, A_LENGTH, A_MARKERS, A_PAD, A_CRC,
       A_CRC_EXPECTED, A_CRC_CHECKED, A_ULP, A_RESERVED, A_FPDUPTR, A_EXPECTED, A_COUNT };
static const char *const attr_names[A_COUNT] = {
    "stream", "direction", "seq", "frame", "wire_length", "ulpdu_length", "markers", "pad",
    "crc", "crc_expected", "crc_checked", "ulp", "reserved", "fpduptr", "expected"};
static PyObject *attrs[A_COUNT];

/* A str json.dumps writes as it is between quotes: printable ASCII other
 * than '"' and '\' (encode_basestring_ascii escapes the rest). */
static int plain_ascii(PyObject *s)
{
    if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s))
        return 0;
    const char *c = (const char *)PyUnicode_DATA(s);
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c[i] < 0x20 || c[i] > 0x7E || c[i] == '"' || c[i] == '\\')
            return 0;
    }
    return 1;
}

static int json_keys_set(json_keys *into, PyObject *tuple)
{
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    if (n > JSON_KEYS_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many keys");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(tuple, i);
        if (!plain_ascii(key) || PyUnicode_GET_LENGTH(key) > 30) {
            PyErr_SetString(PyExc_ValueError, "keys are short printable ASCII str");
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < into->count; i++)
        Py_CLEAR(into->key[i]);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(tuple, i);
        Py_ssize_t len = PyUnicode_GET_LENGTH(key);
        into->key[i] = Py_NewRef(key);
        into->name[i][0] = '"';
        memcpy(into->name[i] + 1, PyUnicode_DATA(key), (size_t)len);
        memcpy(into->name[i] + 1 + len, "\": ", 3);
        into->name_len[i] = len + 4;
    }
    into->count = n;
    return 0;
}

/* json_table(fpdu_type, marker_type, ddp_keys, rdmap_keys): what
 * fpdu_json writes. */
static PyObject *py_json_table(PyObject *self, PyObject *args)
{
    PyObject *fpdu, *marker, *ddp, *rdmap;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:json_table", &PyType_Type, &fpdu, &PyType_Type, &marker,
                          &PyTuple_Type, &ddp, &PyTuple_Type, &rdmap))
        return NULL;
    for (int a = 0; a < A_COUNT; a++) {
        if (attrs[a] == NULL && (attrs[a] = PyUnicode_InternFromString(attr_names[a])) == NULL)
            return NULL;
    }
    json_keys ddp_keys = {0}, rdmap_keys = {0};
    if (json_keys_set(&ddp_keys, ddp) < 0 || json_keys_set(&rdmap_keys, rdmap) < 0) {
        for (Py_ssize_t i = 0; i < ddp_keys.count; i++)
            Py_DECREF(ddp_keys.key[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < json_ddp.count; i++)
        Py_CLEAR(json_ddp.key[i]);
    for (Py_ssize_t i = 0; i < json_rdmap.count; i++)
        Py_CLEAR(json_rdmap.key[i]);
    json_ddp = ddp_keys;
    json_rdmap = rdmap_keys;
    Py_XSETREF(json_fpdu_type, (PyTypeObject *)Py_NewRef(fpdu));
    Py_XSETREF(json_marker_type, (PyTypeObject *)Py_NewRef(marker));
    Py_RETURN_NONE;
}

/* A line being written: on the stack while it fits, else on the heap. */
typedef struct {
    char *p;
    Py_ssize_t len, cap;
    int heap;
} text;

static int text_add(text *t, const char *s, Py_ssize_t n)
{
    if (n > t->cap - t->len) {
        Py_ssize_t cap = t->cap;
        while (n > cap - t->len) {
            if (cap > PY_SSIZE_T_MAX / 4) {
                PyErr_NoMemory();
                return -1;
            }
            cap *= 2;
        }
        char *p = PyMem_Malloc((size_t)cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(p, t->p, (size_t)t->len);
        if (t->heap)
            PyMem_Free(t->p);
        t->p = p;
        t->cap = cap;
        t->heap = 1;
    }
    memcpy(t->p + t->len, s, (size_t)n);
    t->len += n;
    return 0;
}

#define TEXT_LIT(t, s) text_add((t), (s), (Py_ssize_t)(sizeof(s) - 1))

static int text_u64(text *t, unsigned long long v, int negative)
{
    char digits[24];
    int i = (int)sizeof(digits);
    do {
        digits[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (negative)
        digits[--i] = '-';
    return text_add(t, digits + i, (Py_ssize_t)sizeof(digits) - i);
}

/* An int as decimal: 1 written, 0 when it does not fit 64 bits (Python
 * writes the line), -1 on error. */
static int text_int(text *t, PyObject *v)
{
    int overflow;
    long long s = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (s == -1 && PyErr_Occurred())
        return -1;
    if (overflow == 0) {
        unsigned long long magnitude = s < 0 ? 0ULL - (unsigned long long)s : (unsigned long long)s;
        return text_u64(t, magnitude, s < 0) < 0 ? -1 : 1;
    }
    if (overflow < 0)
        return 0;
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    return text_u64(t, u, 0) < 0 ? -1 : 1;
}

/* An exact int (type(v) is int), as _fpdu_line requires of its numbers. */
static int text_exact_int(text *t, PyObject *v)
{
    return PyLong_CheckExact(v) ? text_int(t, v) : 0;
}

static int text_plain_str(text *t, PyObject *s)
{
    if (!plain_ascii(s))
        return 0;
    if (TEXT_LIT(t, "\"") < 0 ||
        text_add(t, (const char *)PyUnicode_DATA(s), PyUnicode_GET_LENGTH(s)) < 0 ||
        TEXT_LIT(t, "\"") < 0)
        return -1;
    return 1;
}

/* An exact int within 32 bits, for the CRC fields: 1 and *out, 0 if not. */
static int u32_of(PyObject *v, uint32_t *out)
{
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow;
    long long s = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (s == -1 && PyErr_Occurred())
        return -1;
    if (overflow || s < 0 || s > 0xFFFFFFFFLL)
        return 0;
    *out = (uint32_t)s;
    return 1;
}

static int text_hex32(text *t, uint32_t v)
{
    static const char hex[] = "0123456789abcdef";
    char s[12] = {'"', '0', 'x'};
    for (int i = 0; i < 8; i++)
        s[3 + i] = hex[(v >> (28 - 4 * i)) & 0xF];
    s[11] = '"';
    return text_add(t, s, 12);
}

/* One marker's object (records.py _marker_line). */
static int text_marker(text *t, PyObject *m)
{
    if (Py_TYPE(m) != json_marker_type)
        return 0;
    PyObject *v[4] = {NULL, NULL, NULL, NULL};
    static const int which[4] = {A_SEQ, A_RESERVED, A_FPDUPTR, A_EXPECTED};
    static const char *const names[4] = {"{\"seq\": ", ", \"reserved\": ", ", \"fpduptr\": ",
                                         ", \"expected\": "};
    long long n[4] = {0, 0, 0, 0};
    int r = 1;
    for (int i = 0; i < 4 && r == 1; i++) {
        v[i] = PyObject_GetAttr(m, attrs[which[i]]);
        if (v[i] == NULL) {
            r = -1;
            break;
        }
        int overflow = 0;
        if (!PyLong_CheckExact(v[i]))
            r = 0;
        else if ((n[i] = PyLong_AsLongLongAndOverflow(v[i], &overflow)) == -1 && PyErr_Occurred())
            r = -1;
        else if (overflow || n[i] < 0)
            r = 0; /* big or negative: Python writes the line */
    }
    for (int i = 0; i < 4 && r == 1; i++) {
        if (text_add(t, names[i], (Py_ssize_t)strlen(names[i])) < 0 ||
            text_u64(t, (unsigned long long)n[i], 0) < 0)
            r = -1;
    }
    if (r == 1) {
        /* MarkerRecord.ok: RFC 5044 §4.3, the two low bits of FPDUPTR as zero. */
        int ok = n[1] == 0 && (n[2] & IW_FPDUPTR_MASK) == n[3];
        if ((ok ? TEXT_LIT(t, ", \"ok\": true}") : TEXT_LIT(t, ", \"ok\": false}")) < 0)
            r = -1;
    }
    for (int i = 0; i < 4; i++)
        Py_XDECREF(v[i]);
    return r;
}

/* The members of ``ulp`` named by ``keys`` (records.py _members). */
static int text_members(text *t, PyObject *ulp, const json_keys *keys)
{
    int first = 1;
    for (Py_ssize_t i = 0; i < keys->count; i++) {
        PyObject *v = PyDict_GetItemWithError(ulp, keys->key[i]);
        if (v == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        if ((!first && TEXT_LIT(t, ", ") < 0) ||
            text_add(t, keys->name[i], keys->name_len[i]) < 0)
            return -1;
        first = 0;
        int r;
        if (v == Py_True)
            r = TEXT_LIT(t, "true") < 0 ? -1 : 1;
        else if (v == Py_False)
            r = TEXT_LIT(t, "false") < 0 ? -1 : 1;
        else if (v == Py_None)
            r = TEXT_LIT(t, "null") < 0 ? -1 : 1;
        else if (PyLong_Check(v))
            r = text_int(t, v);
        else
            r = text_plain_str(t, v); /* anything else: Python writes the line */
        if (r != 1)
            return r;
    }
    return 1;
}

/* The line of an FPDU record, without its newline: 1 and t filled, 0 when
 * some value is not of the usual kinds (Python writes the line), -1 on error. */
static int fpdu_text(text *t, PyObject *record)
{
    PyObject *v[A_ULP + 1] = {NULL};
    int r = 1;
    for (int a = 0; a <= A_ULP; a++) {
        if ((v[a] = PyObject_GetAttr(record, attrs[a])) == NULL) {
            r = -1;
            goto done;
        }
    }
    uint32_t crc = 0, expected = 0;
    PyObject *markers = v[A_MARKERS], *pad = v[A_PAD], *ulp = v[A_ULP], *frame = v[A_FRAME];
    PyObject *checked = v[A_CRC_CHECKED];
    if ((checked != Py_True && checked != Py_False) || !PyTuple_Check(markers) || !PyBytes_Check(pad) ||
        !PyDict_CheckExact(ulp) || (frame != Py_None && !PyLong_CheckExact(frame))) {
        r = 0;
        goto done;
    }
    if ((r = u32_of(v[A_CRC], &crc)) != 1 || (r = u32_of(v[A_CRC_EXPECTED], &expected)) != 1)
        goto done;
#define STEP(call)                                                                                \
    do {                                                                                          \
        int step_ = (call);                                                                       \
        if (step_ != 1) {                                                                         \
            r = step_ < 0 ? -1 : 0;                                                               \
            goto done;                                                                            \
        }                                                                                         \
    } while (0)
#define LIT(s) STEP(TEXT_LIT(t, s) < 0 ? -1 : 1)
    LIT("{\"type\": \"fpdu\", \"stream\": ");
    STEP(text_exact_int(t, v[A_STREAM]));
    LIT(", \"direction\": ");
    STEP(text_plain_str(t, v[A_DIRECTION]));
    LIT(", \"seq\": ");
    STEP(text_exact_int(t, v[A_SEQ]));
    LIT(", \"frame\": ");
    if (frame == Py_None)
        LIT("null");
    else
        STEP(text_int(t, frame));
    LIT(", \"wire_length\": ");
    STEP(text_exact_int(t, v[A_WIRE]));
    LIT(", \"ulpdu_length\": ");
    STEP(text_exact_int(t, v[A_LENGTH]));
    if (checked == Py_False)
        LIT(", \"crc_ok\": null, \"crc\": ");
    else if (crc == expected)
        LIT(", \"crc_ok\": true, \"crc\": ");
    else
        LIT(", \"crc_ok\": false, \"crc\": ");
    STEP(text_hex32(t, crc) < 0 ? -1 : 1);
    LIT(", \"crc_expected\": ");
    STEP(text_hex32(t, expected) < 0 ? -1 : 1);
    LIT(", \"pad\": \"");
    {
        static const char hex[] = "0123456789abcdef";
        const uint8_t *p = (const uint8_t *)PyBytes_AS_STRING(pad);
        Py_ssize_t n = PyBytes_GET_SIZE(pad);
        for (Py_ssize_t i = 0; i < n; i++) {
            char two[2] = {hex[p[i] >> 4], hex[p[i] & 0xF]};
            STEP(text_add(t, two, 2) < 0 ? -1 : 1);
        }
    }
    LIT("\", \"markers\": [");
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(markers); i++) {
        if (i)
            LIT(", ");
        STEP(text_marker(t, PyTuple_GET_ITEM(markers, i)));
    }
    LIT("], \"ddp\": {");
    STEP(text_members(t, ulp, &json_ddp));
    LIT("}, \"rdmap\": {");
    STEP(text_members(t, ulp, &json_rdmap));
    LIT("}}");
#undef LIT
#undef STEP
done:
    for (int a = 0; a <= A_ULP; a++)
        Py_XDECREF(v[a]);
    return r;
}

/* fpdu_json(record) -> str | None: the --json line of an FpduRecord as
 * records.py's _fpdu_line writes it (json.dumps of its to_json()), or None
 * when a value is not of the usual kinds (big or negative numbers, other
 * types, strings json.dumps escapes): Python writes that line. */
static PyObject *py_fpdu_json(PyObject *self, PyObject *record)
{
    if (json_fpdu_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "json_table was not called");
        return NULL;
    }
    if (Py_TYPE(record) != json_fpdu_type) {
        PyErr_SetString(PyExc_TypeError, "an FpduRecord");
        return NULL;
    }
    char stack[1024];
    text t = {stack, 0, (Py_ssize_t)sizeof(stack), 0};
    int r = fpdu_text(&t, record);
    PyObject *out = NULL;
    if (r == 1) {
        out = PyUnicode_New(t.len, 127);
        if (out != NULL)
            memcpy(PyUnicode_DATA(out), t.p, (size_t)t.len);
    } else if (r == 0) {
        out = Py_NewRef(Py_None);
    }
    if (t.heap)
        PyMem_Free(t.p);
    return out;
}

/* --- a record made without its __init__ (records.py) ---------------------- */

/* The deallocator of classes made by a class statement (type()'s),
 * learnt from one made the first time it is needed. */
static destructor class_dealloc;

/* Whether cls is a class made by a class statement whose bases up to
 * object are all such classes (each with type()'s deallocator): its
 * instances are object's header plus slots (and perhaps __dict__ and
 * __weakref__), which tp_alloc zeroes, so an instance none of whose code
 * ran is still sound. -1 with an exception if the probe class failed. */
static int plain_class(PyTypeObject *cls)
{
    if (class_dealloc == NULL) {
        PyObject *probe = PyObject_CallFunction((PyObject *)&PyType_Type, "s()N", "probe",
                                                PyDict_New());
        if (probe == NULL)
            return -1;
        class_dealloc = ((PyTypeObject *)probe)->tp_dealloc;
        Py_DECREF(probe);
    }
    for (PyTypeObject *t = cls; t != &PyBaseObject_Type; t = t->tp_base) {
        if (t == NULL || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_dealloc != class_dealloc ||
            t->tp_itemsize != 0)
            return 0;
    }
    return cls->tp_alloc != NULL && !(cls->tp_flags & Py_TPFLAGS_IS_ABSTRACT);
}

/* new_record(cls, slots, *values): an instance of cls with each member
 * descriptor of the tuple slots set to the value at its place, as a
 * frozen slots dataclass's __init__ sets its fields (object.__setattr__
 * each), without a Python call per field. */
static PyObject *py_new_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "new_record(cls, slots, *values)");
        return NULL;
    }
    PyObject *cls_obj = args[0], *slots = args[1];
    int plain = PyType_Check(cls_obj) ? plain_class((PyTypeObject *)cls_obj) : 0;
    if (plain < 0)
        return NULL;
    if (!plain) {
        PyErr_SetString(PyExc_TypeError, "cls is a class of slots made by a class statement");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)cls_obj;
    if (!PyTuple_Check(slots) || PyTuple_GET_SIZE(slots) != nargs - 2) {
        PyErr_SetString(PyExc_TypeError, "slots is a tuple with one descriptor per value");
        return NULL;
    }
    Py_ssize_t n = nargs - 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(slots, i);
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            !PyType_IsSubtype(cls, PyDescr_TYPE((PyDescrObject *)d))) {
            PyErr_SetString(PyExc_TypeError, "slots are member descriptors of cls or its bases");
            return NULL;
        }
    }
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(slots, i);
        if (Py_TYPE(d)->tp_descr_set(d, obj, args[i + 2]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    }
    return obj;
}

PyMethodDef iw_decode_methods[] = {
    {"pcap_batch", py_pcap_batch, METH_VARARGS,
     "Decode the complete records of a pcap buffer down to TCP segments."},
    {"pcapng_batch", py_pcapng_batch, METH_VARARGS,
     "Decode the Enhanced Packet Blocks of a pcapng buffer down to TCP segments."},
    {"tcp_packet", py_tcp_packet, METH_VARARGS, "Decode one frame down to a TCP segment."},
    {"fpdu_view", py_fpdu_view, METH_VARARGS, "Take apart the FPDU at an offset of a buffer."},
    {"describe_table", py_describe_table, METH_VARARGS,
     "Set the opcodes describe_ulpdu's twin names, with their T bit and queue."},
    {"describe_ulpdu", py_describe_ulpdu, METH_VARARGS,
     "The DDP/RDMAP fields of a ULPDU without problems, or None."},
    {"fpdu_walk", py_fpdu_walk, METH_VARARGS,
     "The clean FPDUs in a row from an offset of a buffer, taken apart."},
    {"fpdu_count", py_fpdu_count, METH_VARARGS,
     "How many clean FPDUs fpdu_walk would take from an offset of a buffer, and where it stops."},
    {"json_table", py_json_table, METH_VARARGS,
     "Set the record types and ULPDU keys fpdu_json writes."},
    {"fpdu_json", py_fpdu_json, METH_O, "The --json line of an FpduRecord, or None."},
    {"new_record", (PyCFunction)(void (*)(void))py_new_record, METH_FASTCALL,
     "An instance of a class of slots with its member descriptors set, no __init__ run."},
    {NULL, NULL, 0, NULL},
};
