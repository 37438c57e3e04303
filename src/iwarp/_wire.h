/*
 * The wire layout, once, for every C file of iwarp._speedups: FPDU
 * geometry and markers (RFC 5044 §4), byte order, and the DDP (RFC 5041)
 * and RDMAP (RFC 5040) header facts the kernels read. The Python
 * declarations of the same formats are mpa/wire.py, ddp/wire.py and
 * rdmap/wire.py; tests hold both to one verdict.
 *
 * Byte order: every multi-octet field is read and written octet by octet,
 * so a field may sit at any address (no unaligned word reads) and the host's
 * order never matters.
 *
 * Layout facts the kernels rely on (RFC 5044 §4.3): from the marker origin
 * on, FPDUs are multiples of 4 octets and markers 4 octets every 512, so a
 * marker never splits the length field, the PAD or the CRC.
 */
#ifndef IWARP_WIRE_H
#define IWARP_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* --- MPA (RFC 5044) ------------------------------------------------------ */

#define IW_LENGTH_SIZE 2u        /* §4.1 ULPDU_Length */
#define IW_CRC_SIZE 4u           /* §4.1 CRC */
#define IW_MAX_ULPDU 0xFFFFu     /* what the 16-bit ULPDU_Length field holds */
#define IW_MARKER_INTERVAL 512u  /* §4.3 a marker every 512 stream octets */
#define IW_PHASE_MASK 511u       /* a stream position's phase: mod 512 */
#define IW_MARKER_SIZE 4u        /* §4.3 Reserved (16 bits), FPDUPTR (16 bits) */
#define IW_MARKER_STRIDE 508u    /* content octets between two markers */
#define IW_FPDUPTR_MASK 0xFFFCu  /* FPDUPTR's low two bits are ignored */
/* The largest FPDU without markers: a 16-bit ULPDU_Length, PAD and CRC. */
#define IW_FPDU_MAX (0x10000u + 8u)

/* --- DDP (RFC 5041) and RDMAP (RFC 5040) ------------------------------------ */

#define IW_DDP_TAGGED_FLAG 0x80u  /* §4.1 DDP control: T */
#define IW_DDP_LAST_FLAG 0x40u    /* L */
#define IW_DDP_VERSION_MASK 0x03u /* DV */
/* The header up to the payload, with RDMAP's control octet (RsvdULP[0]):
 * tagged §4.2 control, RDMAP, STag (4), TO (8); untagged §4.3 control,
 * RDMAP, RsvdULP (4), QN (4), MSN (4), MO (4). */
#define IW_TAGGED_HEADER 14u
#define IW_UNTAGGED_HEADER 18u
#define IW_TAGGED_STAG_AT 2u
#define IW_TAGGED_TO_AT 6u
#define IW_UNTAGGED_QN_AT 6u
#define IW_UNTAGGED_MSN_AT 10u
#define IW_UNTAGGED_MO_AT 14u

/* --- byte order ---------------------------------------------------------- */

static inline uint32_t iw_be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }

static inline uint32_t iw_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t iw_be64(const uint8_t *p)
{
    return ((uint64_t)iw_be32(p) << 32) | iw_be32(p + 4);
}

static inline uint32_t iw_le32(const uint8_t *p)
{
    return ((uint32_t)p[3] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[1] << 8) | p[0];
}

static inline void iw_put_be16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void iw_put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The low `size` octets of v, big-endian (a TO or MO field of 1..8 octets). */
static inline void iw_put_be(uint8_t *p, size_t size, uint64_t v)
{
    while (size-- > 0) {
        p[size] = (uint8_t)v;
        v >>= 8;
    }
}

/* RFC 5044 §4.1: the CRC field holds the CRC32c register's octets, least
 * significant first. */
static inline uint32_t iw_crc_field(const uint8_t *p) { return iw_le32(p); }

/* A marker (§4.3): Reserved zero, then FPDUPTR. */
static inline void iw_put_marker(uint8_t *p, uint32_t fpduptr)
{
    p[0] = 0;
    p[1] = 0;
    iw_put_be16(p + 2, fpduptr);
}

/* --- FPDU geometry --------------------------------------------------------- */

/* PAD octets after a ULPDU of n octets: the FPDU's content is a multiple of 4. */
static inline size_t iw_pad(size_t n) { return (4 - ((IW_LENGTH_SIZE + n) & 3)) & 3; }

/* Content octets of an FPDU (§4.1): ULPDU_Length, ULPDU, PAD, CRC. */
static inline size_t iw_content(size_t n) { return IW_LENGTH_SIZE + n + iw_pad(n) + IW_CRC_SIZE; }

/*
 * Where an FPDU whose first octet is at `phase` (mod 512 from the marker
 * origin) puts its parts: `lead` 4 when it starts on a marker position
 * (that marker, FPDUPTR 0, belongs to it), the content split by `count`
 * markers, the first before content offset `first` and one every 508
 * content octets after it; `wire` its octets in all. Without markers:
 * lead 0, count 0, first SIZE_MAX. As mpa.framing.fpdu_wire_size.
 */
typedef struct {
    size_t lead, first, count, content, wire;
} IwFrame;

static inline IwFrame iw_frame(size_t n, unsigned phase, int markers)
{
    IwFrame f = {0, SIZE_MAX, 0, iw_content(n), 0};
    f.wire = f.content;
    if (markers) {
        f.lead = phase == 0 ? IW_MARKER_SIZE : 0;
        f.first = IW_MARKER_INTERVAL - ((phase + f.lead) & IW_PHASE_MASK);
        if (f.first < f.content)
            f.count = (f.content - f.first + IW_MARKER_STRIDE - 1) / IW_MARKER_STRIDE;
        f.wire = f.lead + f.content + IW_MARKER_SIZE * f.count;
    }
    return f;
}

/* The FPDUPTR of the frame's last marker inside it (0: none). §4.3's
 * FPDUPTR is 16 bits: an FPDU whose markers would count back further
 * cannot be framed, and a receiver refuses one (MPA error 3). */
static inline size_t iw_last_fpduptr(const IwFrame *f)
{
    return f->count ? f->first + IW_MARKER_INTERVAL * (f->count - 1) : 0;
}

/* Whether the FPDUPTR `found` of a marker `expected` octets after the
 * ULPDU_Length field is right; `either`: also counted from a leading
 * marker (Rev 0 and culley-02 peers). */
static inline int iw_fpduptr_ok(size_t found, size_t expected, size_t lead, int either)
{
    return found == expected || (either && lead && found == expected + lead);
}

/* Copy `len` content octets from content offset `c` of the received FPDU
 * whose ULPDU_Length field is at `h` to `dst`, around the markers. `dst`
 * must not overlap the FPDU. */
static inline void iw_gather(const uint8_t *h, const IwFrame *f, size_t c, size_t len,
                             uint8_t *dst)
{
    while (len) {
        size_t before = c < f->first ? 0 : (c - f->first) / IW_MARKER_STRIDE + 1;
        size_t next = c < f->first ? f->first : f->first + before * IW_MARKER_STRIDE;
        size_t piece = next - c < len ? next - c : len;
        memcpy(dst, h + c + IW_MARKER_SIZE * before, piece);
        dst += piece;
        c += piece;
        len -= piece;
    }
}

/*
 * Framing into one contiguous buffer (a sender): content octets go in with
 * a marker before every one at phase 0, its FPDUPTR counting back to the
 * ULPDU_Length field of the FPDU being built (`header`). The caller sizes
 * `out` for the whole FPDU (iw_frame's wire).
 */
typedef struct {
    uint8_t *out;
    size_t pos;     /* next octet written */
    unsigned phase; /* (stream position of out[pos] - origin) mod 512 */
    size_t header;  /* index of the current FPDU's ULPDU_Length field */
    int markers;
} IwWriter;

static inline void iw_write_marker(IwWriter *w, uint32_t fpduptr)
{
    iw_put_marker(w->out + w->pos, fpduptr);
    w->pos += IW_MARKER_SIZE;
    w->phase = (w->phase + IW_MARKER_SIZE) & IW_PHASE_MASK;
}

/* n octets of FPDU content, markers where the stream has them. */
static inline void iw_write(IwWriter *w, const uint8_t *src, size_t n)
{
    while (n) {
        if (w->markers && w->phase == 0)
            iw_write_marker(w, (uint32_t)(w->pos - w->header));
        size_t room = w->markers ? IW_MARKER_INTERVAL - w->phase : n;
        size_t k = n < room ? n : room;
        memcpy(w->out + w->pos, src, k);
        w->pos += k;
        w->phase = (unsigned)((w->phase + k) & IW_PHASE_MASK);
        src += k;
        n -= k;
    }
}

/* Begin an FPDU: with markers at phase 0, its leading marker (FPDUPTR 0,
 * CRC'd with this FPDU; §4.3), then the ULPDU_Length field of a ULPDU of
 * n octets. */
static inline void iw_write_begin(IwWriter *w, size_t n)
{
    if (w->markers && w->phase == 0)
        iw_write_marker(w, 0);
    w->header = w->pos;
    uint8_t length[IW_LENGTH_SIZE];
    iw_put_be16(length, (uint32_t)n);
    iw_write(w, length, IW_LENGTH_SIZE);
}

/* End an FPDU whose ULPDU has n octets and began at out[begin] (its leading
 * marker included): the PAD, a marker right before the CRC where the stream
 * has one, the CRC field (`crc` the CRC32c of out[begin:pos], or 0 when
 * CRCs are off: computed by the caller, which knows the CRC code). */
static inline void iw_write_pad(IwWriter *w, size_t n)
{
    static const uint8_t zeros[4] = {0, 0, 0, 0};
    iw_write(w, zeros, iw_pad(n));
    if (w->markers && w->phase == 0)
        iw_write_marker(w, (uint32_t)(w->pos - w->header));
}

static inline void iw_write_crc(IwWriter *w, uint32_t crc)
{
    iw_put_le32(w->out + w->pos, crc);
    w->pos += IW_CRC_SIZE;
    w->phase = (w->phase + IW_CRC_SIZE) & IW_PHASE_MASK;
}

#endif
