/* SPDX-License-Identifier: MIT */
/* The tcp transport: the software RC engine over the control socket. */
#ifndef RDMX_TCP_H
#define RDMX_TCP_H

#include "sw.h"

extern const struct rdmx_sw_pipe rdmx_tcp_pipe;

#endif
