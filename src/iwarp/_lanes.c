/*
 * iwarp._speedups, the whole-message lanes: a message's FPDUs written with
 * sendmsg from the caller's buffer, and a receive ring whose complete FPDUs
 * are checked and placed into windows the cores published.
 */
#include "_speedups.h"

PyMethodDef iw_lane_methods[] = {
    {NULL, NULL, 0, NULL},
};
