/*
 * iwarp._speedups, the small-message lane: a one-segment Send framed into
 * its FPDU in one call, and a received whole FPDU that is a one-segment
 * Send for the head posted receive buffer checked and placed in one call.
 */
#include "_speedups.h"

PyMethodDef iw_small_methods[] = {
    {NULL, NULL, 0, NULL},
};
