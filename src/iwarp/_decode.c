/*
 * iwarp._speedups, the capture analyzer's loops: capture records, TCP
 * reassembly of one direction and the FPDU walk over a batch of packets.
 */
#include "_speedups.h"

PyMethodDef iw_decode_methods[] = {
    {NULL, NULL, 0, NULL},
};
