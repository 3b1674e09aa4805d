#!/usr/bin/env python3
"""Write the fuzzers' seed corpora (tests/fuzz/corpus/*). Run after a
change to either wire format; the files are committed."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEND, WRITE, WRITE_IMM, READ_REQ, ATOMIC_REQ, ACK, NAK, READ_RESP, ATOMIC_RESP, CREDIT = range(1, 11)


# Header bytes per type (sw_proto.h): each ends at its type's last field.
HDR_LEN = {SEND: 24, WRITE: 56, WRITE_IMM: 56, READ_REQ: 56, ATOMIC_REQ: 56,
           ACK: 16, NAK: 16, READ_RESP: 24, ATOMIC_RESP: 32, CREDIT: 40}


def frame(t, op=0, credits=0, length=0, rkey=b"RKEYRKEY", seq=0,
          addr=b"ADDRADDR", arg0=0, arg1=0, payload=b""):
    flags = 1 if t in (WRITE, WRITE_IMM, READ_REQ) and op and payload[:8] == b"ADDRADDR" else 0
    hdr = struct.pack(">BBBBIQII", 3, t, op, flags, credits, seq, length, 0)
    hdr += struct.pack(">QQ", arg0, arg1) + addr + rkey
    assert len(hdr) == 56
    return hdr[:HDR_LEN[t]] + payload


def tcp_seeds():
    s = {
        "credit": frame(CREDIT, credits=5, rkey=b"\0" * 8, addr=b"\0" * 8),
        "write": frame(WRITE, length=16, payload=bytes(range(16))),
        "write_bad_rkey": frame(WRITE, length=16, rkey=b"\0" * 7 + b"\1",
                                payload=b"x" * 16),
        "write_imm": frame(WRITE_IMM, length=8, arg0=7, payload=b"y" * 8),
        "read_req": frame(READ_REQ, length=32),
        "fetch_add": frame(ATOMIC_REQ, op=1, arg0=3),
        "cmp_swap": frame(ATOMIC_REQ, op=2, arg0=0, arg1=9),
        "send": frame(SEND, length=10, payload=b"hello rdmx"),
        "send_too_big": frame(SEND, length=300, payload=b"z" * 300),
        "answers": frame(ACK, seq=0) +
                   frame(READ_RESP, seq=1, length=64, payload=b"r" * 64) +
                   frame(ATOMIC_RESP, seq=2, arg0=41) +
                   frame(NAK, op=2, seq=3),
        "nak_access": frame(NAK, op=1, seq=0),
        "truncated": frame(WRITE, length=4000, payload=b"w" * 100),
        # single copy is refused on a pipe without it (tcp)
        "write_byref": frame(WRITE, op=1, length=64,
                             payload=b"ADDRADDR" + struct.pack(">Q", 64)),
    }
    s["stream"] = b"".join(s[k] for k in ("credit", "write", "read_req",
                                          "fetch_add", "send", "answers"))
    return s


def hs(t, flags, body):
    return struct.pack(">IHBBI", 0x52444D58, 2, t, flags, len(body)) + body


def hs_seeds():
    # transports (tcp|shm), caps, nonce, host id
    hello = hs(1, 0, struct.pack(">QQ", 3, 0) + b"n" * 32 + b"h" * 16)
    hello_key = hs(1, 1, struct.pack(">QQ", 3, 0) + b"n" * 32 + b"h" * 16)
    welcome = hs(2, 0, struct.pack(">HB5xQ", 0, 0, 1) + b"s" * 32)
    result = hs(4, 0, b"\0" * 8 + b"m" * 32)
    return {
        "server_hello": b"\x01" + hello + hs(3, 0, b"\0" * 32),
        "server_hello_key": b"\x03" + hello_key + hs(3, 0, b"m" * 32),
        "client_welcome": b"\x00" + welcome + result,
        "client_welcome_refused": b"\x00" + hs(2, 0, struct.pack(
            ">HB5xQ", 2, 0, 1) + b"\0" * 32),
        "client_welcome_key": b"\x02" + hs(2, 1, struct.pack(">HB5xQ", 0, 0, 1)
                                           + b"s" * 32) + result,
        "garbage": b"\x01GET / HTTP/1.0\r\n\r\n",
    }


def shm_seeds():
    # flags, tail skew, head skew, then the stream the peer writes
    t = tcp_seeds()
    plain = struct.pack(">BQQ", 0, 0, 0)
    return {
        "stream": plain + t["stream"],
        "write_byref": plain + t["write_byref"],
        "answers": plain + t["answers"],
        "wild_tail": struct.pack(">BQQ", 1, 1 << 40, 0) + t["write"],
        "wild_head": struct.pack(">BQQ", 2, 0, 1 << 40) + t["send"],
    }


for name, seeds in (("tcp_frames", tcp_seeds()), ("handshake", hs_seeds()),
                    ("shm_ring", shm_seeds())):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    for k, v in seeds.items():
        with open(os.path.join(d, k), "wb") as f:
            f.write(v)
