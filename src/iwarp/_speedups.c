/*
 * iwarp._speedups: the loops that run per FPDU or per DDP segment, in C.
 *
 * Optional: every function here has a pure-Python twin of the same name and
 * signature in src/iwarp/_kernels.py, whose docstrings are the contract of
 * both; iwarp._accel picks one module at import, and tests compare the two
 * function by function (results, buffer contents, refusals). Python keeps
 * every protocol decision; these functions only walk buffers:
 *
 *   crc32c(data, value=0)        CRC-32C (RFC 3385): carry-less multiply
 *                                folding (PCLMULQDQ) when the CPU has it,
 *                                else the SSE4.2 crc32 instruction, else
 *                                tables (checked at import with cpuid).
 *   frame_run(...)               the FPDUs of a run of DDP segments of one
 *                                message (RFC 5041 §5.2 + RFC 5044 §4-§6).
 *   scan(...)                    every complete FPDU of a receive buffer:
 *                                CRC, markers checked and cut out in place.
 *   segment_run(...)             how many decoded segments continue one
 *                                tagged or untagged message.
 *   place_run(...)               copy those segments' payloads into one
 *                                target the caller checked once.
 *
 * The wire layout (FPDU geometry, markers, byte order) is _wire.h's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_speedups.h"
#include "_wire.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <nmmintrin.h>
#include <immintrin.h>
#include <wmmintrin.h>
#define IWARP_X86 1
#endif

/* --- CRC-32C ------------------------------------------------------------- */

static uint32_t crc_table[8][256];

/* Which CRC-32C code runs: chosen once at import from cpuid, lowered by
 * IWARP_ACCEL_CRC=hw|table (or IWARP_ACCEL_NO_SSE42, = table) to test the
 * fallbacks. */
enum { CRC_TABLE = 0, CRC_HW = 1, CRC_FOLD = 2, CRC_FOLD512 = 3 };
static int crc_kind = CRC_TABLE;
static const char *const crc_names[] = {
    "CRC32C with tables",
    "CRC32C with SSE4.2",
    "CRC32C with PCLMULQDQ folding",
    "CRC32C with VPCLMULQDQ folding (AVX-512)",
};

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
#ifdef IWARP_X86
    /* Folding 16 octets per PCLMULQDQ measured slower than three streams of
     * crc32 instructions (the AMD EPYC: 17 against 32 GB/s), so it
     * is not chosen on its own (IWARP_ACCEL_CRC=fold runs it); folding 64
     * octets per VPCLMULQDQ on 512-bit registers is, where the CPU and the
     * OS (AVX-512 state saved, XCR0) allow it. */
    unsigned int a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2)) {
        crc_kind = CRC_HW;
        unsigned int a7, b7, c7, d7;
        if ((c & bit_PCLMUL) && (c & bit_OSXSAVE) && __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7) &&
            (b7 & bit_AVX512F) && (c7 & bit_VPCLMULQDQ)) {
            unsigned int lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            if ((lo & 0xE6) == 0xE6) /* SSE, AVX, opmask, ZMM0-15 high, ZMM16-31 */
                crc_kind = CRC_FOLD512;
        }
    }
#endif
}

#ifdef IWARP_X86
static int have_pclmul(void)
{
    unsigned int a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_PCLMUL) && (c & bit_SSE4_2);
}
#endif

/* Slicing-by-8: portable, about 1.5 octets per cycle. `state` is inverted. */
static uint32_t crc_soft(uint32_t state, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        state = (state >> 8) ^ crc_table[0][(state ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= state;
        state = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^
                crc_table[5][(w >> 16) & 0xFF] ^ crc_table[4][(w >> 24) & 0xFF] ^
                crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
                crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        state = (state >> 8) ^ crc_table[0][(state ^ *p++) & 0xFF];
    return state;
}

#ifdef IWARP_X86
/* One stream of crc32 instructions: for short inputs and the tails. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw_1(uint32_t state, const uint8_t *p,
                                                             size_t n)
{
    uint64_t s = state;
    while (n && ((uintptr_t)p & 7)) {
        s = _mm_crc32_u8((uint32_t)s, *p++);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        s = _mm_crc32_u64(s, w);
        p += 8;
        n -= 8;
    }
    while (n--)
        s = _mm_crc32_u8((uint32_t)s, *p++);
    return (uint32_t)s;
}

/* Multiplication in GF(2) modulo the reflected CRC-32C polynomial. */
static uint32_t gf2_mul(uint32_t a, uint32_t b)
{
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) {
        if (a & 0x80000000u)
            r ^= b;
        a <<= 1;
        b = (b >> 1) ^ ((b & 1) ? 0x82F63B78u : 0);
    }
    return r;
}

/* x^(8*n) mod P (reflected), for shifting a CRC state over n zero octets. */
static uint32_t shift_constant(size_t n)
{
    uint32_t result = 0x80000000u; /* x^0 */
    uint32_t power = 0x00800000u;  /* x^8 */
    while (n) {
        if (n & 1)
            result = gf2_mul(result, power);
        power = gf2_mul(power, power);
        n >>= 1;
    }
    return result;
}

/* Longer inputs run three independent streams of crc32 instructions over
 * three blocks of B octets, to hide the instruction's 3-cycle latency; the
 * partial values are joined by multiplying with x^(8*B) modulo the
 * polynomial. That multiply is linear in the 32-bit value, so it is four
 * table lookups (tables built at import, one set per block size). */
#define SHIFT_SIZES 7 /* B = 64 << k, k = 0..6: 64 .. 4096 octets */
static uint32_t shift_table[SHIFT_SIZES][4][256];

static void shift_init(void)
{
    for (int k = 0; k < SHIFT_SIZES; k++) {
        uint32_t constant = shift_constant((size_t)64 << k);
        for (int byte = 0; byte < 4; byte++)
            for (uint32_t v = 0; v < 256; v++)
                shift_table[k][byte][v] = gf2_mul(v << (8 * byte), constant);
    }
}

static inline uint32_t shift_by(int k, uint32_t v)
{
    return shift_table[k][0][v & 0xFF] ^ shift_table[k][1][(v >> 8) & 0xFF] ^
           shift_table[k][2][(v >> 16) & 0xFF] ^ shift_table[k][3][v >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t state, const uint8_t *p,
                                                           size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        state = _mm_crc32_u8(state, *p++);
        n--;
    }
    for (int k = SHIFT_SIZES - 1; k >= 0; k--) {
        size_t block = (size_t)64 << k;
        while (n >= 3 * block) {
            uint64_t a = state, b = 0, c = 0;
            const uint8_t *pb = p + block, *pc = p + 2 * block;
            for (size_t i = 0; i < block; i += 8) {
                uint64_t wa, wb, wc;
                memcpy(&wa, p + i, 8);
                memcpy(&wb, pb + i, 8);
                memcpy(&wc, pc + i, 8);
                a = _mm_crc32_u64(a, wa);
                b = _mm_crc32_u64(b, wb);
                c = _mm_crc32_u64(c, wc);
            }
            state = shift_by(k, shift_by(k, (uint32_t)a) ^ (uint32_t)b) ^ (uint32_t)c;
            p += 3 * block;
            n -= 3 * block;
        }
    }
    return crc_hw_1(state, p, n);
}

/*
 * Folding with carry-less multiplication (the method of Gopal et al.,
 * "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction", Intel, 2009), for long inputs.
 *
 * Reflected CRC: in a 128-bit lane loaded from memory, bit k (bit 0 the
 * low bit of the first octet) is the coefficient of x^(127-k). Its low
 * half H holds the high-degree coefficients: lane = H*x^64 + L. Moving a
 * lane D bits further along the message multiplies it by x^D, and
 * H*x^(D+64) + L*x^D is congruent (mod P) to H*c1 + L*c2 with
 * c1 = x^(D+64) mod P, c2 = x^D mod P, each product under 96 bits: a
 * 128-bit value with the same remainder, XORed into the lane D bits on.
 * PCLMULQDQ of two reflected 64-bit values gives their product times x
 * (the reflected 127-bit result sits in a 128-bit lane), so the constants
 * are x^(D+63) mod P and x^(D-1) mod P, reflected into 64 bits.
 *
 * Four lanes fold 64 octets at a time (D = 512), then fold into one lane
 * (D = 384, 256, 128), then 16 octets at a time (D = 128). Folding keeps
 * the message's remainder and leaves leading zeros, which a CRC started
 * from 0 ignores; so the last lane and the tail are summed with the crc32
 * instruction from state 0. The starting state is XORed into the first
 * 32 bits, as the instruction would take it.
 */
#define FOLD_MIN 256
/* fold_k[i] for D = 128 * (i + 1) bits, up to 2048: {x^(D+63), x^(D-1)} mod P. */
#define FOLD_KS 16
static uint64_t fold_k[FOLD_KS][2];

static uint64_t xpow_mod(unsigned e) /* x^e mod P, reflected into 64 bits */
{
    uint64_t r = 1; /* normal form, degree < 32 */
    while (e--) {
        r <<= 1;
        if (r & 0x100000000ull)
            r ^= 0x11EDC6F41ull;
    }
    uint64_t out = 0;
    for (int d = 0; d < 32; d++)
        if (r & (1ull << d))
            out |= 1ull << (63 - d);
    return out;
}

static void fold_init(void)
{
    for (int i = 0; i < FOLD_KS; i++) {
        unsigned d = 128u * (unsigned)(i + 1);
        fold_k[i][0] = xpow_mod(d + 63);
        fold_k[i][1] = xpow_mod(d - 1);
    }
}

__attribute__((target("sse4.2,pclmul"))) static inline __m128i fold(__m128i lane, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(lane, k, 0x00), _mm_clmulepi64_si128(lane, k, 0x11));
}

__attribute__((target("sse4.2,pclmul"))) static inline __m128i fold_k_at(int i)
{
    return _mm_set_epi64x((long long)fold_k[i][1], (long long)fold_k[i][0]);
}

__attribute__((target("sse4.2,pclmul"))) static uint32_t crc_fold(uint32_t state, const uint8_t *p,
                                                                    size_t n)
{
    if (n < FOLD_MIN)
        return crc_hw(state, p, n);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)state));
    p += 64;
    n -= 64;
    __m128i k = fold_k_at(3);
    while (n >= 64) {
        x0 = _mm_xor_si128(fold(x0, k), _mm_loadu_si128((const __m128i *)p));
        x1 = _mm_xor_si128(fold(x1, k), _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = _mm_xor_si128(fold(x2, k), _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = _mm_xor_si128(fold(x3, k), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    __m128i x = _mm_xor_si128(_mm_xor_si128(fold(x0, fold_k_at(2)), fold(x1, fold_k_at(1))),
                              _mm_xor_si128(fold(x2, fold_k_at(0)), x3));
    k = fold_k_at(0);
    while (n >= 16) {
        x = _mm_xor_si128(fold(x, k), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint64_t s = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    s = _mm_crc32_u64(s, (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x)));
    return crc_hw_1((uint32_t)s, p, n);
}

/* The same folding on 512-bit registers: VPCLMULQDQ multiplies four
 * 128-bit lanes at once. Four registers fold 256 octets at a time (D =
 * 2048), are folded into one (D = 1536, 1024, 512), which folds 64 octets
 * at a time (D = 512); its four lanes are folded into one (D = 384, 256,
 * 128) and the rest goes as in crc_fold. */
#define FOLD512_MIN 512
#define FOLD512_TARGET "sse4.2,pclmul,avx512f,vpclmulqdq"

__attribute__((target(FOLD512_TARGET))) static inline __m512i fold512(__m512i lanes, int i)
{
    __m512i k = _mm512_broadcast_i32x4(fold_k_at(i));
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(lanes, k, 0x00),
                            _mm512_clmulepi64_epi128(lanes, k, 0x11));
}

__attribute__((target(FOLD512_TARGET))) static uint32_t crc_fold512(uint32_t state,
                                                                    const uint8_t *p, size_t n)
{
    if (n < FOLD512_MIN)
        return crc_hw(state, p, n);
    __m512i z0 = _mm512_loadu_si512((const void *)p);
    __m512i z1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(p + 192));
    z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)state)));
    p += 256;
    n -= 256;
    while (n >= 256) {
        z0 = _mm512_xor_si512(fold512(z0, 15), _mm512_loadu_si512((const void *)p));
        z1 = _mm512_xor_si512(fold512(z1, 15), _mm512_loadu_si512((const void *)(p + 64)));
        z2 = _mm512_xor_si512(fold512(z2, 15), _mm512_loadu_si512((const void *)(p + 128)));
        z3 = _mm512_xor_si512(fold512(z3, 15), _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    __m512i z = _mm512_xor_si512(_mm512_xor_si512(fold512(z0, 11), fold512(z1, 7)),
                                 _mm512_xor_si512(fold512(z2, 3), z3));
    while (n >= 64) {
        z = _mm512_xor_si512(fold512(z, 3), _mm512_loadu_si512((const void *)p));
        p += 64;
        n -= 64;
    }
    __m128i x = _mm_xor_si128(
        _mm_xor_si128(fold(_mm512_extracti32x4_epi32(z, 0), fold_k_at(2)),
                      fold(_mm512_extracti32x4_epi32(z, 1), fold_k_at(1))),
        _mm_xor_si128(fold(_mm512_extracti32x4_epi32(z, 2), fold_k_at(0)),
                      _mm512_extracti32x4_epi32(z, 3)));
    __m128i k = fold_k_at(0);
    while (n >= 16) {
        x = _mm_xor_si128(fold(x, k), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint64_t s = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    s = _mm_crc32_u64(s, (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x)));
    return crc_hw_1((uint32_t)s, p, n);
}
#endif

static uint32_t crc_update(uint32_t state, const uint8_t *p, size_t n)
{
#ifdef IWARP_X86
    if (crc_kind == CRC_FOLD512)
        return crc_fold512(state, p, n);
    if (crc_kind == CRC_FOLD)
        return crc_fold(state, p, n);
    if (crc_kind == CRC_HW)
        return crc_hw(state, p, n);
#endif
    return crc_soft(state, p, n);
}

uint32_t iw_crc32c(uint32_t state, const uint8_t *p, size_t n)
{
    return crc_update(state, p, n);
}

static PyObject *py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer data;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k:crc32c", &data, &value))
        return NULL;
    uint32_t state = ~(uint32_t)value;
    if (data.len > 65536) {
        /* Long buffers are summed without the GIL (the buffer stays exported). */
        Py_BEGIN_ALLOW_THREADS
        state = crc_update(state, data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        state = crc_update(state, data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(~state);
}

/* --- argument helpers ------------------------------------------------------ */

/* The object that exports a buffer's memory (through memoryviews). */
static PyObject *exporter(const Py_buffer *b)
{
    PyObject *o = b->obj;
    return o != NULL && PyMemoryView_Check(o) ? PyMemoryView_GET_BASE(o) : o;
}

/* Whether an output may not be written while reading an input: both are
 * views of one object (the rule the pure-Python twin can check too), or
 * they share an octet (memcpy between them would be undefined; compared as
 * integers, the pointers may belong to different objects). Empty buffers
 * share nothing. */
int iw_overlaps(const Py_buffer *a, const Py_buffer *b)
{
    if (a->len <= 0 || b->len <= 0)
        return 0;
    PyObject *x = exporter(a);
    if (x != NULL && x == exporter(b))
        return 1;
    uintptr_t a0 = (uintptr_t)a->buf, b0 = (uintptr_t)b->buf;
    return a0 < b0 ? b0 - a0 < (uintptr_t)a->len : a0 - b0 < (uintptr_t)b->len;
}

/* Record k's two words (native uint32: ULPDU offset, length), copied out:
 * the records buffer may start at any address. */
static inline void record_at(const uint8_t *records, size_t k, uint32_t *at, uint32_t *n)
{
    memcpy(at, records + 8 * k, 4);
    memcpy(n, records + 8 * k + 4, 4);
}

/* --- framing (sender) ------------------------------------------------------ */

/* An FPDU's most octets at any phase, markers or not: the most PAD (3),
 * a marker per 508 content octets and three more (mpa.framing's bound for
 * the output buffer is the same). */
static size_t fpdu_bound(size_t ulpdu)
{
    size_t content = IW_LENGTH_SIZE + ulpdu + 3 + IW_CRC_SIZE;
    return content + IW_MARKER_SIZE * (content / IW_MARKER_STRIDE + 3);
}

/*
 * frame_run(out, header, payload, start, stop, room, field_at, field_size,
 *           base, last_mask, markers, crc, phase) -> (frames, phase)
 *
 * `out` is None (the FPDUs are returned as a new bytes object) or a writable
 * buffer of at least frame_bound(...) octets (then `frames` is the number of
 * octets written at its start).
 *
 * Segments of payload[start:stop], `room` octets each (the last may be
 * shorter; start == stop frames one empty segment). Each ULPDU is `header`
 * with the big-endian `field_size`-octet field at `field_at` set to
 * base + (segment offset in payload) and `last_mask` or-ed into octet 0 for
 * the segment that ends the payload; then the payload slice. Each FPDU is
 * length, ULPDU, PAD, markers where the stream has them, CRC (zero when off).
 * `phase` is the stream phase (mod 512) of the first octet, and the one
 * returned that of the octet after the run, markers or not.
 */
static PyObject *py_frame_run(PyObject *self, PyObject *args)
{
    PyObject *target, *base_obj;
    Py_buffer header, payload, given = {0};
    Py_ssize_t start, stop, room, field_at, field_size, last_mask, phase;
    int markers, crc;
    if (!PyArg_ParseTuple(args, "Oy*y*nnnnnOnppn:frame_run", &target, &header, &payload, &start,
                          &stop, &room, &field_at, &field_size, &base_obj, &last_mask, &markers,
                          &crc, &phase))
        return NULL;
    PyObject *result = NULL, *out = NULL;
    uint8_t hdr[32];
    Py_ssize_t hlen = header.len;
    /* base: any unsigned 64-bit value (OverflowError otherwise, as in Python). */
    unsigned long long base = PyLong_AsUnsignedLongLong(base_obj);
    if (base == (unsigned long long)-1 && PyErr_Occurred())
        goto done;
    /* Bounds compared without adding two caller-given values: field_at and
       room may be anything up to PY_SSIZE_T_MAX. */
    if (hlen > 32 || field_size < 1 || field_size > 8 || field_size > hlen || field_at < 0 ||
        field_at > hlen - field_size || room <= 0 || room > 0xFFFF - hlen || start < 0 ||
        stop < start || stop > payload.len || last_mask < 0 || last_mask > 0xFF || phase < 0 ||
        phase > IW_PHASE_MASK || (phase & 3)) {
        PyErr_SetString(PyExc_ValueError, "frame_run: inconsistent arguments");
        goto done;
    }
    /* room <= 0xFFFF, so this sum cannot overflow. */
    Py_ssize_t segments = stop == start ? 1 : (stop - start - 1) / room + 1;
    /* Every segment's ULPDU is at most the first's (a one-segment run of a
       small message needs no room for a full MULPDU). */
    Py_ssize_t largest = stop - start < room ? stop - start : room;
    size_t each = fpdu_bound((size_t)(hlen + largest));
    if ((size_t)segments > (size_t)PY_SSIZE_T_MAX / each) {
        PyErr_SetString(PyExc_ValueError, "frame_run: the run is too long");
        goto done;
    }
    size_t bound = (size_t)segments * each;
    uint8_t *dest;
    if (target == Py_None) {
        out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound);
        if (out == NULL)
            goto done;
        dest = (uint8_t *)PyBytes_AS_STRING(out);
    } else {
        if (PyObject_GetBuffer(target, &given, PyBUF_WRITABLE) < 0)
            goto done;
        if ((size_t)given.len < bound) {
            PyErr_SetString(PyExc_ValueError, "frame_run: the output buffer is too small");
            goto done;
        }
        if (iw_overlaps(&given, &header) || iw_overlaps(&given, &payload)) {
            PyErr_SetString(PyExc_ValueError, "frame_run: the output buffer overlaps an input");
            goto done;
        }
        dest = given.buf;
    }
    IwWriter w = {dest, 0, (unsigned)phase, 0, markers};
    const uint8_t *src = payload.buf;
    Py_ssize_t offset = start;
    do {
        Py_ssize_t n = stop - offset < room ? stop - offset : room;
        size_t ulpdu = (size_t)(hlen + n);
        size_t begin = w.pos;
        memcpy(hdr, header.buf, hlen);
        iw_put_be(hdr + field_at, (size_t)field_size, base + (unsigned long long)offset);
        if (offset + n == payload.len)
            hdr[0] |= (uint8_t)last_mask;
        iw_write_begin(&w, ulpdu);
        iw_write(&w, hdr, hlen);
        iw_write(&w, src + offset, n);
        iw_write_pad(&w, ulpdu);
        iw_write_crc(&w, crc ? ~crc_update(0xFFFFFFFFu, w.out + begin, w.pos - begin) : 0);
        offset += n;
    } while (offset < stop);
    if (out == NULL) {
        result = Py_BuildValue("(nI)", (Py_ssize_t)w.pos, w.phase);
        goto done;
    }
    if (_PyBytes_Resize(&out, (Py_ssize_t)w.pos) < 0)
        goto done;
    result = Py_BuildValue("(NI)", out, w.phase);
    out = NULL;
done:
    Py_XDECREF(out);
    if (given.obj != NULL)
        PyBuffer_Release(&given);
    PyBuffer_Release(&header);
    PyBuffer_Release(&payload);
    return result;
}

/* --- scanning (receiver) --------------------------------------------------- */

enum { SCAN_OK = 0, SCAN_CRC = 2, SCAN_MARKER = 3, SCAN_LENGTH = 4 };

/* The first marker of the FPDU whose ULPDU_Length field is at `h` with a
 * wrong FPDUPTR: its offset from `h`, or -1 when all are right. */
static Py_ssize_t scan_markers(const uint8_t *h, const IwFrame *f, int either)
{
    for (size_t k = 0; k < f->count; k++) {
        size_t m = f->first + IW_MARKER_INTERVAL * k;
        size_t found = iw_be16(h + m + 2) & IW_FPDUPTR_MASK;
        if (!iw_fpduptr_ok(found, m, f->lead, either))
            return (Py_ssize_t)m;
    }
    return -1;
}

/* Make the ULPDU of n octets at h + 2 contiguous in place: markers with a
 * ULPDU offset below n split it (a last one may sit after the PAD, before
 * the CRC, and stays). */
static void cut_markers(uint8_t *h, const IwFrame *f, size_t n)
{
    size_t inside = 0;
    while (inside < f->count && f->first - IW_LENGTH_SIZE + IW_MARKER_STRIDE * inside < n)
        inside++;
    size_t dst = f->first; /* first marker: the ULPDU continues here */
    for (size_t k = 0; k < inside; k++) {
        size_t from = f->first + IW_MARKER_INTERVAL * k + IW_MARKER_SIZE;
        size_t piece_end = (k + 1 < inside) ? f->first + IW_MARKER_INTERVAL * (k + 1)
                                            : IW_LENGTH_SIZE + n + IW_MARKER_SIZE * inside;
        memmove(h + dst, h + from, piece_end - from);
        dst += piece_end - from;
    }
}

/*
 * scan(buffer, start, end, markers, crc, phase, limit, either)
 *   -> (records, stop, phase, error, a, b, where)
 *
 * Decodes every complete FPDU in buffer[start:end]. `records` holds one
 * (ULPDU offset, ULPDU length) pair of native uint32 per FPDU. With markers
 * the buffer must be writable: the ULPDU is made contiguous in place.
 * `error` is 0, or 2 (CRC: a received, b computed, where = FPDU start),
 * 3 (marker: a found FPDUPTR, b expected, where = the marker) or 4 (length
 * above `limit`: a the length, where = the length field); `stop` is where
 * decoding stopped (the first octet not consumed). `either`: the markers
 * inside an FPDU that starts with a marker may also count from that
 * marker (4 more), the reading of Rev 0 and culley-02 peers.
 */
static PyObject *py_scan(PyObject *self, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t start, end, phase_arg, limit_arg;
    int markers, crc, either;
    if (!PyArg_ParseTuple(args, "Onnppnnp:scan", &obj, &start, &end, &markers, &crc, &phase_arg,
                          &limit_arg, &either))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, markers ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    uint32_t *recs = NULL;
    if (start < 0 || end < start || end > view.len || view.len > 0xFFFFFFFFll || phase_arg < 0 ||
        phase_arg > IW_PHASE_MASK || (phase_arg & 3) || limit_arg < 0) {
        PyErr_SetString(PyExc_ValueError, "scan: inconsistent arguments");
        goto done;
    }
    unsigned phase = (unsigned)phase_arg;
    size_t limit = (size_t)limit_arg;
    size_t cap = 64, count = 0;
    recs = PyMem_Malloc(cap * 2 * sizeof(uint32_t));
    if (recs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint8_t *p = view.buf;
    Py_ssize_t i = start;
    int error = SCAN_OK;
    unsigned long long a = 0, b = 0;
    Py_ssize_t where = 0;
    for (;;) {
        size_t lead = (markers && phase == 0) ? IW_MARKER_SIZE : 0;
        if ((size_t)(end - i) < lead + IW_LENGTH_SIZE)
            break;
        size_t n = iw_be16(p + i + lead);
        if (n > limit) {
            error = SCAN_LENGTH;
            a = n;
            where = i + (Py_ssize_t)lead;
            break;
        }
        IwFrame f = iw_frame(n, phase, markers);
        if ((size_t)(end - i) < f.wire)
            break;
        Py_ssize_t stop = i + (Py_ssize_t)f.wire;
        if (crc) {
            uint32_t received = iw_crc_field(p + stop - IW_CRC_SIZE);
            uint32_t computed = ~crc_update(0xFFFFFFFFu, p + i, f.wire - IW_CRC_SIZE);
            if (received != computed) {
                error = SCAN_CRC;
                a = received;
                b = computed;
                where = i;
                break;
            }
        }
        size_t header = (size_t)i + lead;
        if (lead && (iw_be16(p + i + 2) & IW_FPDUPTR_MASK)) {
            error = SCAN_MARKER;
            a = iw_be16(p + i + 2);
            b = 0;
            where = i;
            break;
        }
        if (f.count) {
            where = scan_markers(p + header, &f, either);
            if (where >= 0) {
                error = SCAN_MARKER;
                a = iw_be16(p + header + (size_t)where + 2);
                b = (size_t)where;
                where += (Py_ssize_t)header;
                break;
            }
            where = 0;
            cut_markers(p + header, &f, n);
        }
        if (count == cap) {
            cap *= 2;
            uint32_t *grown = PyMem_Realloc(recs, cap * 2 * sizeof(uint32_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            recs = grown;
        }
        recs[2 * count] = (uint32_t)(header + 2);
        recs[2 * count + 1] = (uint32_t)n;
        count++;
        i = stop;
        phase = (unsigned)((phase + f.wire) & IW_PHASE_MASK);
    }
    PyObject *records = PyBytes_FromStringAndSize((const char *)recs, (Py_ssize_t)(count * 8));
    if (records == NULL)
        goto done;
    result = Py_BuildValue("(NnIiKKn)", records, i, phase, error, a, b, where);
done:
    PyMem_Free(recs);
    PyBuffer_Release(&view);
    return result;
}

/* --- placement ------------------------------------------------------------- */

/*
 * segment_run(buffer, records, index, tagged, control_mask, control, rdmap,
 *             key, msn, offset) -> (count, octets, last)
 *
 * From record `index` on, counts the segments that continue one message
 * with nothing to decide per segment: each longer than its header, with
 * (DDP control & control_mask) == control and RsvdULP octet == rdmap; tagged:
 * STag == key and TO == offset, advancing; untagged: QN == key, MSN == msn,
 * MO == offset, advancing. Tagged runs end after a segment with L set.
 * Returns the count, their payload octets and whether the last one had L.
 */
static PyObject *py_segment_run(PyObject *self, PyObject *args)
{
    Py_buffer buf, recs;
    Py_ssize_t index, control_mask, control, rdmap, key, msn;
    PyObject *offset_obj;
    int tagged;
    if (!PyArg_ParseTuple(args, "y*y*npnnnnnO:segment_run", &buf, &recs, &index, &tagged,
                          &control_mask, &control, &rdmap, &key, &msn, &offset_obj))
        return NULL;
    /* offset: any unsigned 64-bit value (OverflowError otherwise). */
    unsigned long long offset = PyLong_AsUnsignedLongLong(offset_obj);
    if (offset == (unsigned long long)-1 && PyErr_Occurred()) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&recs);
        return NULL;
    }
    const uint8_t *p = buf.buf;
    const uint8_t *r = recs.buf;
    Py_ssize_t total = recs.len / 8, count = 0;
    unsigned long long octets = 0;
    int last = 0;
    size_t hsize = tagged ? IW_TAGGED_HEADER : IW_UNTAGGED_HEADER;
    for (Py_ssize_t k = index; k >= 0 && k < total; k++) {
        uint32_t at32, n32;
        record_at(r, (size_t)k, &at32, &n32);
        size_t at = at32, n = n32;
        if (n <= hsize || at > (size_t)buf.len || n > (size_t)buf.len - at)
            break;
        const uint8_t *h = p + at;
        /* Compared as Python compares the integers (any value is allowed;
         * one outside the field's range never matches). */
        if (((Py_ssize_t)h[0] & control_mask) != control || (Py_ssize_t)h[1] != rdmap)
            break;
        if (tagged) {
            if ((Py_ssize_t)iw_be32(h + IW_TAGGED_STAG_AT) != key ||
                iw_be64(h + IW_TAGGED_TO_AT) != offset)
                break;
        } else if ((Py_ssize_t)iw_be32(h + IW_UNTAGGED_QN_AT) != key ||
                   (Py_ssize_t)iw_be32(h + IW_UNTAGGED_MSN_AT) != msn ||
                   iw_be32(h + IW_UNTAGGED_MO_AT) != offset) {
            break;
        }
        size_t length = n - hsize;
        offset += length;
        octets += length;
        count++;
        if (h[0] & IW_DDP_LAST_FLAG) {
            last = 1;
            break;
        }
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&recs);
    return Py_BuildValue("(nKi)", count, octets, last);
}

/*
 * place_run(buffer, records, index, count, header_size, target)
 *
 * Copies the payloads of records[index:index+count] one after the other
 * into `target`, which must be exactly their total length.
 */
static PyObject *py_place_run(PyObject *self, PyObject *args)
{
    Py_buffer buf, recs, target;
    Py_ssize_t index, count, hsize;
    if (!PyArg_ParseTuple(args, "y*y*nnnw*:place_run", &buf, &recs, &index, &count, &hsize,
                          &target))
        return NULL;
    PyObject *result = NULL;
    const uint8_t *p = buf.buf;
    const uint8_t *r = recs.buf;
    Py_ssize_t total = recs.len / 8;
    size_t need = 0, len = (size_t)buf.len;
    /* index + count could overflow: compare count with what is left. */
    if (index < 0 || count < 0 || index > total || count > total - index || hsize < 0) {
        PyErr_SetString(PyExc_ValueError, "place_run: records out of range");
        goto done;
    }
    /* The copies below must not change the buffers they read (the records
     * were checked once, here) nor read what they wrote. */
    if (iw_overlaps(&target, &buf) || iw_overlaps(&target, &recs)) {
        PyErr_SetString(PyExc_ValueError, "place_run: the target overlaps the input");
        goto done;
    }
    for (Py_ssize_t k = index; k < index + count; k++) {
        uint32_t at, n;
        record_at(r, (size_t)k, &at, &n);
        /* Widened, and compared without adding: at + n may not fit 32 bits. */
        if ((size_t)n < (size_t)hsize || at > len || n > len - at) {
            PyErr_SetString(PyExc_ValueError, "place_run: a record lies outside the buffer");
            goto done;
        }
        if (n - (size_t)hsize > (size_t)target.len - need) {
            PyErr_SetString(PyExc_ValueError, "place_run: the target is not the run's length");
            goto done;
        }
        need += n - (size_t)hsize; /* <= target.len: no overflow */
    }
    if (need != (size_t)target.len) {
        PyErr_SetString(PyExc_ValueError, "place_run: the target is not the run's length");
        goto done;
    }
    uint8_t *dst = target.buf;
    for (Py_ssize_t k = index; k < index + count; k++) {
        uint32_t at, n;
        record_at(r, (size_t)k, &at, &n);
        size_t size = n - (size_t)hsize;
        memcpy(dst, p + at + hsize, size);
        dst += size;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&recs);
    PyBuffer_Release(&target);
    return result;
}

static PyObject *py_describe(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(crc_names[crc_kind]);
}

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "CRC-32C of a buffer, continuing from value."},
    {"frame_run", py_frame_run, METH_VARARGS, "Frame a run of DDP segments into FPDUs."},
    {"scan", py_scan, METH_VARARGS, "Decode every complete FPDU of a buffer."},
    {"segment_run", py_segment_run, METH_VARARGS, "Count segments continuing one message."},
    {"place_run", py_place_run, METH_VARARGS, "Copy a run of payloads into one target."},
    {"describe", py_describe, METH_NOARGS, "Which CRC32C implementation runs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "iwarp._speedups", "C kernels for the per-FPDU loops.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_init();
#ifdef IWARP_X86
    shift_init();
    fold_init();
    const char *force = getenv("IWARP_ACCEL_CRC");
    if (getenv("IWARP_ACCEL_NO_SSE42") != NULL || (force != NULL && strcmp(force, "table") == 0))
        crc_kind = CRC_TABLE;
    else if (force != NULL && strcmp(force, "hw") == 0 && crc_kind > CRC_HW)
        crc_kind = CRC_HW;
    else if (force != NULL && strcmp(force, "fold") == 0 && crc_kind >= CRC_HW && have_pclmul())
        crc_kind = CRC_FOLD;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* The kernels of the other source files join this one module. */
    if (PyModule_AddFunctions(m, iw_lane_methods) < 0 ||
        PyModule_AddFunctions(m, iw_decode_methods) < 0 ||
        PyModule_AddFunctions(m, iw_small_methods) < 0 || iw_fastpath_add(m) < 0 ||
        iw_qpbase_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
