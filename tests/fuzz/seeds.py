#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (corpus/<target>/) and the
hand-written regression inputs (regressions/<target>/), as programs
in the encoding their harnesses read (fuzz_stream.c, ring_prog.c,
fuzz_ring_attach.c). The offsets poked in the ring seeds follow header
version 1 (head at byte 64, tail at 128...), only to start the fuzzer near
the fields; the harnesses know no layout, and the fuzzer finds new fields by
itself when it changes. Run from anywhere: python3 tests/fuzz/seeds.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u16(v):
    return struct.pack("<H", v & 0xFFFF)


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


# --- ring programs (ring_prog.c) ---

def bufs(length, pieces=1, cut1=0, cut2=0):
    return u16(length) + bytes([pieces]) + u16(cut1) + u16(cut2)


def write(n, pieces=1, cut1=0, cut2=0):
    return b"\x00" + bufs(n, pieces, cut1, cut2)


def read(n, pieces=1, cut1=0, cut2=0):
    return b"\x01" + bufs(n, pieces, cut1, cut2)


def peek(n):
    return b"\x02" + bufs(n)


COUNTS = b"\x03"
CLOSE_WRITER = b"\x05"
CLOSE_READER = b"\x06"
# Opcode 9 and a byte: the producer's other operations.
CLOSE_WRITER_RESET = b"\x09\x01"


def reclaim(advance_ms, idle_ms):
    return b"\x09\x02" + u16(advance_ms) + bytes([idle_ms])


def reclaim_consumed(advance_ms, idle_ms):
    return b"\x09\x05" + u16(advance_ms) + bytes([idle_ms])


def set_limit(most):
    return b"\x09\x03" + most.to_bytes(3, "little")


def write_no_grow(n):
    return b"\x09\x04" + bufs(n)


def elastic(window_log, most_shift, creator=0):
    """The setup bytes of a ring that can grow: window 4 KiB << WINDOW_LOG
    (the setup byte modulo 5), most WINDOW << MOST_SHIFT."""
    setup = next(b for b in range(256) if b & 0xE0 == creator | 0x20 and b % 5 == window_log)
    return bytes([setup, most_shift])


def poke_add(index, delta, width_log=3):
    """Adds DELTA to the WIDTH-byte word at byte offset INDEX * width."""
    return b"\x04" + bytes([width_log | 4 | 8, index, delta & 0xFF])


def poke_set(index, value, width_log=3):
    return b"\x04" + bytes([width_log | 4, index]) + value.to_bytes(8, "little")[: 1 << width_log]


def poke_data(offset, value):
    return b"\x08" + bytes([3]) + u32(offset) + u64(value)


def unread_copy(delta, n):
    return b"\x07" + bytes([0]) + u16(delta) + bufs(n)


RING = {
    "basic": b"\x00" + write(100) + read(50) + peek(30) + read(100) + COUNTS,
    "wrap": b"\x00" + write(3000) + read(3000) + write(3000, 3, 1000, 2000) + read(4000, 3, 7, 3999) + COUNTS,
    "full": b"\x00" + write(8192) + write(10) + COUNTS + read(8192) + read(1),
    "eof": b"\x00" + write(10) + CLOSE_WRITER + read(20) + read(20) + write(5),
    "reader_gone": b"\x01" + CLOSE_READER + write(5) + COUNTS,
    "unread_copy": b"\x00" + write(100) + read(40) + unread_copy(0, 100) + unread_copy(70, 10) + unread_copy(0xFFFF, 4),
    "producer_created": b"\x84" + write(70000) + read(70000) + COUNTS,
    "head_ahead": b"\x00" + write(10) + poke_add(8, 5) + read(100) + COUNTS + write(10),
    "head_wild": b"\x40" + write(10) + poke_set(8, 1 << 40) + read(100) + COUNTS,
    "tail_back": b"\x00" + write(100) + read(100) + poke_add(16, -3) + COUNTS + write(8192),
    "tail_ahead": b"\x00" + write(100) + poke_add(16, 50) + write(10) + COUNTS,
    "capacity": b"\x00" + poke_set(1, 1 << 30) + write(5000) + read(5000),
    "writer_closed_flag": b"\x00" + write(10) + poke_set(18, 1, 2) + read(20) + read(20) + write(1),
    "reader_closed_flag": b"\x00" + poke_set(34, 1, 2) + write(1) + COUNTS,
    "waiters": b"\x00" + poke_set(49, 5, 2) + poke_set(65, 5, 2) + write(10) + read(10),
    "data": b"\x00" + write(64) + poke_data(3, 0xDEADBEEF) + read(64),
    "eof_reset": b"\x00" + write(10) + CLOSE_WRITER_RESET + read(20) + read(20) + peek(1) + write(5),
    # The elastic ring: growth up the ladder, back to the window, reclaim.
    "grow": elastic(0, 3) + write(4096) + write(8192) + write(16000) + COUNTS + read(30000)
    + read(100) + write(100) + read(100) + COUNTS,
    "grow_reclaim": elastic(1, 4) + write(20000) + write(20000) + read(40000) + reclaim(100, 10)
    + write(100) + reclaim(1000, 50) + read(100) + reclaim(2000, 50) + COUNTS + write(9000),
    "grow_producer": elastic(0, 5, 0x80) + write(60000) + write(60000) + read(50000)
    + unread_copy(0, 1000) + read(70000) + reclaim(10, 0),
    "no_grow": elastic(0, 2) + write(4096) + write_no_grow(10) + write(10) + read(5000),
    # Issue 24: the consumer gives the pages back (version 3's handshake:
    # the producer's writing word at byte 76, the consumer's reclaiming at
    # 140 and its count at 144).
    "consumer_reclaim": elastic(1, 4) + write(20000) + write(20000) + read(40000)
    + reclaim_consumed(10, 50) + reclaim_consumed(100, 50) + reclaim_consumed(100, 50)
    + write(100) + read(100) + reclaim(1000, 50) + reclaim_consumed(1000, 50) + COUNTS
    + write(30000) + read(30000),
    "consumer_reclaim_unread": elastic(0, 3) + write(9000) + read(100) + reclaim_consumed(10, 0)
    + reclaim_consumed(1000, 0) + read(9000) + reclaim_consumed(1000, 0) + write(5),
    "writing_held": elastic(1, 4) + write(20000) + read(20000) + poke_set(19, 1, 2)
    + reclaim_consumed(10, 5) + reclaim_consumed(100, 5) + poke_set(19, 0, 2)
    + reclaim_consumed(100, 5) + write(100) + read(100),
    "reclaiming_held": elastic(0, 3) + write(100) + read(100) + poke_set(35, 1, 2) + write(10)
    + COUNTS + write_no_grow(10) + poke_set(35, 0, 2) + write(10) + read(20),
    "reclaimed_moved": elastic(0, 4) + write(20000) + poke_add(18, 5) + write(100)
    + read(20100) + poke_add(18, -1) + reclaim(100, 10) + write(100) + read(100),
    "limit": elastic(0, 5) + set_limit(10000) + write(20000) + write(20000) + COUNTS + set_limit(0)
    + read(9000) + COUNTS + write(100) + set_limit(0xFFFFFF) + write(60000) + COUNTS,
}

# --- attach (fuzz_ring_attach.c): kind, seals, capacity, patches, size, role ---

SEALS_OK = 0x80


def attach(kind=0, seals=SEALS_OK, cap=0, patches=b"", size=b"\x00", role=0, prog=b"", grow=None):
    """A window of 4 KiB << CAP (the byte modulo 15); GROW: the ring can
    grow to 2**GROW windows (the byte gets bit 0x40)."""
    if grow is not None:
        cap = next(b for b in range(0x40, 0x80) if b % 15 == cap)
    geometry = bytes([cap]) if grow is None else bytes([cap, grow])
    return bytes([kind, seals]) + geometry + patches + size + bytes([role]) + prog


def patches(*items):
    return bytes([len(items)]) + b"".join(items)


def patch_set(offset, value, width_log=2):
    return bytes([width_log]) + u16(offset) + value.to_bytes(8, "little")[: 1 << width_log]


def patch_add(index, delta, width_log=3):
    return bytes([width_log | 4 | 8, index, delta & 0xFF])


NONE = patches()
ATTACH = {
    "consumer": attach(patches=NONE, prog=read(10) + COUNTS + poke_add(8, 20) + read(30)),
    "producer": attach(patches=NONE, role=1, prog=write(5000) + COUNTS + poke_add(16, 9) + write(9)),
    "size_plus_one": attach(patches=NONE, size=b"\x04\x01"),
    "size_double": attach(patches=NONE, size=b"\x06"),
    "no_seal_seal": attach(seals=0x03, patches=NONE),
    "seal_write": attach(seals=0x0F, patches=NONE),
    "pipe": attach(kind=7, patches=NONE),
    "unsealable": attach(kind=6, patches=NONE),
    "zeros": attach(cap=0x80, patches=NONE),
    "bad_magic": attach(patches=patches(patch_set(0, 0))),
    "bad_version": attach(patches=patches(patch_set(4, 2))),
    "head_wild": attach(patches=patches(patch_add(8, -1))),
    "cursors_apart": attach(patches=patches(patch_add(8, 100), patch_add(16, 50)), prog=read(100)),
    "big": attach(cap=14, patches=NONE, prog=read(1) + COUNTS),
    "elastic_consumer": attach(grow=3, patches=NONE, prog=read(10) + poke_add(8, 9000) + read(9000)),
    "elastic_producer": attach(grow=4, patches=NONE, role=1,
                               prog=write(5000) + write(9000) + COUNTS + reclaim(5, 0) + poke_add(16, 14000)
                               + write(100) + reclaim(10, 0)),
    "elastic_big": attach(cap=12, grow=7, patches=NONE, prog=read(1)),
}

# --- side-channel records (fuzz_stream.c) ---

MAGIC, VERSION = 0x314B5356, 1
SWITCH, WAKE, REVERT = 5, 6, 7


def record(type_, arg=0, arg2=0, magic=MAGIC, version=VERSION):
    return struct.pack("<IHHQQ", magic, version, type_, arg, arg2)


def raw(rec, flags=0, length=None):
    lb = 0x80 if length is None else length
    return b"\x00" + bytes([lb, flags]) + rec


def typed(type_, arg, arg2=0):
    """A well-formed record with raw arguments (mode 0)."""
    return b"\x01" + bytes([type_, 0]) + u64(arg) + bytes([0]) + u64(arg2)


def tcp_read(n):
    return b"\x03" + u16(n)


def ring_read(n, then_empty=True):
    return b"\x04" + u16((n << 1) | int(then_empty))


def tx_send(n):
    return b"\x05" + u16(n)


TX_READY, TX_SHUT = b"\x06", b"\x07"

STREAM = {
    "switch_then_revert": typed(SWITCH, 100) + tcp_read(100) + tcp_read(1) + ring_read(50)
    + typed(REVERT, 0, 80) + ring_read(30) + tcp_read(10),
    "raw_switch": raw(record(SWITCH, 0)) + tcp_read(5) + ring_read(5),
    "raw_truncated": raw(record(SWITCH, 7), flags=0x01) + raw(record(SWITCH, 7), flags=0x02),
    "raw_short": raw(record(WAKE)[:20], length=20) + raw(record(WAKE) + b"xyz", length=27),
    "raw_bad_magic": raw(record(SWITCH, magic=0x314B5357)) + raw(record(SWITCH, version=2)),
    "tx_switch_revert": TX_READY + tx_send(10) + typed(REVERT, 5, 0) + tx_send(3),
    "tx_shut": tx_send(10) + TX_SHUT + TX_READY + tx_send(3),
    "revert_first": typed(REVERT, 0, 0) + typed(SWITCH, 0) + tcp_read(4) + ring_read(0),
    "repeats": typed(SWITCH, 10) + typed(SWITCH, 20) + typed(REVERT, 1, 2) + typed(REVERT, 3, 4),
}

# --- the RDMA proof (fuzz_rdma_proof.c) ---


def flow(data, chunks):
    """One direction's bytes, kept by both ends in CHUNKS (sizes)."""
    out = u16(len(data)) + data
    done = 0
    for k in chunks:
        out += u16(k - 1) + b"\x00\x00" + b"\x00\x00"
        done += k
    assert done == len(data)
    return out


def ipv4(ip, port):
    return b"\x00" + u16(port) + bytes(ip)


def ipv6(port, family=None):
    if family is None:
        return b"\x01" + u16(port) + bytes(range(16))
    return b"\x02" + u16(family) + u16(port) + bytes(range(16))


def proof(setup=0, changed=None, c2a=(b"c" * 64, (32, 32)), a2c=(b"a" * 300, (100, 100, 100)),
          addrs=ipv4((127, 0, 0, 1), 5000) + ipv4((127, 0, 0, 1), 6000), lie=0, raws=()):
    out = bytes([setup | (1 if changed is not None else 0)])
    if changed is not None:
        out += u16(changed)
    out += flow(*c2a) + flow(*a2c) + u64(0x1111) + u64(0x2222) + addrs + bytes([lie])
    return out + b"".join(u64(v) for v in raws)


PROOF = {
    "honest": proof(),
    "changed_c2a_in_prefix": proof(setup=2, changed=10),
    "changed_a2c_past_prefix": proof(changed=290),
    "counts_differ": proof(setup=4),
    "liar_huge": proof(lie=0x05, raws=(1 << 63, (1 << 64) - 1)),
    "nothing_in_common": proof(lie=0x04, raws=(0,)),
    "ipv6": proof(addrs=ipv6(7000) + ipv6(8000)),
    "odd_family": proof(addrs=ipv6(7000, family=0xFFFF) + ipv4((10, 0, 0, 1), 1)),
    "empty": proof(c2a=(b"", ()), a2c=(b"", ())),
}

# --- the RDMA receive side (fuzz_rdma_msg.c) ---


def le3(v):
    return struct.pack("<I", v & 0xFFFFFF)[:3]


# Work requests per queue, as rdma_fake.h's fake_depths numbers them.
DEPTHS = [16, 17, 20, 32, 48, 64, 128, 256]


def rdma_setup(ring_log=1, depth=16, inline=True):
    """Ring of 4 KiB << RING_LOG, DEPTH work requests per queue."""
    return bytes([ring_log | DEPTHS.index(depth) << 3 | (0 if inline else 0x80)])


def peer_write(n):
    """Honest: N bytes (at most the room the credit leaves)."""
    return b"\x00\x00" + le3(n - 1)


def peer_write_past(extra):
    return b"\x00\x02" + bytes([extra])


def peer_write_misplaced(n, at):
    return b"\x00\x04" + le3(n - 1) + le3(at)


# Message types as fuzz_rdma_msg.c's table numbers them.
M_PROOF, M_RING, M_SWITCH, M_SHUT, M_REVERT, M_CREDIT_REQ, M_OFFER, M_RX_WAIT, M_CUT = range(9)


def peer_send(type_, mode=0, fields=b"", length=None):
    if length is not None:
        mode |= 0x80
        fields += bytes([length])
    return b"\x02" + bytes([type_, mode]) + fields


def offer(n, a_delta=None):
    """OFFER of N bytes at the peer's head (or nudged by A_DELTA)."""
    if a_delta is None:
        return peer_send(M_OFFER, 0, le3(n - 1))
    return peer_send(M_OFFER, 1, bytes([a_delta & 0xFF]) + le3(n - 1))


ADAPTER_DONE = b"\x03\x00"
ADAPTER_FAIL = b"\x03\x0f"
ADAPTER_GARBAGE = b"\x03\x10"
POLL = b"\x04"
RECV_FAILED = b"\x07"


def reader(want, poll=True, peek=False, credit=True, wake=True):
    mode = (1 if poll else 0) | (2 if peek else 0) | (4 if credit else 0) | (8 if wake else 0)
    return b"\x05" + bytes([mode]) + le3(want)


def scribble(at, data):
    return b"\x06" + le3(at) + bytes([len(data)]) + data


RDMA_MSG = {
    "honest": rdma_setup() + peer_write(1000) + POLL + reader(600) + ADAPTER_DONE + peer_write(7000)
    + reader(8000) + ADAPTER_DONE + peer_write(8192) + reader(9000) + ADAPTER_DONE,
    "offer": rdma_setup() + peer_write(100) + offer(20000) + POLL + reader(50) + reader(50)
    + reader(1) + ADAPTER_DONE * 4 + POLL + reader(8192) + reader(1) + ADAPTER_DONE * 4 + POLL
    + reader(20000) + ADAPTER_DONE * 6 + POLL + reader(20000) + peer_write(10) + POLL + reader(10),
    "offers_queued": rdma_setup(depth=17) + offer(10) + offer(10, 0) + offer(5) + POLL + reader(30),
    "cut": rdma_setup() + peer_write(500) + POLL + reader(100) + ADAPTER_DONE
    + peer_send(M_CUT, 0, b"") + POLL + reader(400) + peer_write(5) + POLL,
    "shut": rdma_setup() + peer_write(10) + peer_send(M_SHUT) + POLL + reader(20) + peer_write(3)
    + peer_send(M_SHUT, 1, b"\x05") + POLL,
    "credit_req": rdma_setup(depth=16) + peer_write(100) + POLL + reader(100, credit=False)
    + peer_send(M_CREDIT_REQ) * 2 + POLL + ADAPTER_DONE + peer_send(M_CREDIT_REQ) + POLL
    + ADAPTER_DONE * 2,
    "lies": rdma_setup() + peer_write_past(1) + POLL + peer_send(M_OFFER, 1, b"\x07" + le3(5))
    + peer_send(9, 0, u16(0x30) + u64(0) + u64(0)) + peer_send(M_RX_WAIT, length=10) + peer_send(M_REVERT, 0, u64(1) + u64(2))
    + peer_send(M_RING, 0, u64(0) + u64(0)) + POLL + reader(10),
    "misplaced": rdma_setup() + peer_write_misplaced(100, 4000) + POLL + reader(100)
    + scribble(5, b"xyz") + reader(1),
    "broken": rdma_setup() + peer_write(10) + RECV_FAILED + POLL + reader(10) + offer(100) + POLL
    + reader(10) + ADAPTER_FAIL + POLL + reader(100),
    "switch_rx_wait": rdma_setup(ring_log=0, depth=20, inline=False)
    + peer_send(M_SWITCH, 0, u64(0) + u64(0))
    + peer_send(M_RX_WAIT) + peer_write(4096) + POLL + reader(4096) + ADAPTER_GARBAGE,
}

# --- the RDMA rendezvous (fuzz_rdma_setup.c) ---


def rdma_start(accepter, ipv6=False, c2a=100, a2c=200, ring_log=0, depth=64):
    g = (1 if accepter else 0) | (2 if ipv6 else 0) | ring_log << 2 | DEPTHS.index(depth) << 5
    return bytes([g]) + u16(c2a) + u16(a2c)


def call(mode=0, other_host=False, nonce=1, extra=b""):
    """The accepter's call on the connector under test (EXTRA: the fields
    MODE asks for, in order: magic, version, tx, rx, length)."""
    return b"\x00" + bytes([mode, 1 if other_host else 0, nonce]) + extra


def answer(reject=False, mode=0, flip=0, code=0, extra=b""):
    """The connector's answer to the accepter under test."""
    out = b"\x00" + bytes([1 if reject else 0, mode, flip])
    return out + extra[:0] + (bytes([code]) if reject else b"") + extra


ROUTE = b"\x01"


def setup_msg(size_log=2, mode=0, flip=0, type_=None, extra=b""):
    out = b"\x02" + bytes([mode | (0x40 if type_ is not None else 0), flip])
    if type_ is not None:
        out += u16(type_)
    return out + bytes([size_log]) + extra


PROGRESS = b"\x03"
SEND_DONE = b"\x04\x00"
SEND_FAILED = b"\x04\x07"


def event(index, ours=True, pdata=b""):
    return b"\x05" + bytes([index, 1 if ours else 0, len(pdata)]) + pdata


RDMA_SETUP = {
    "conn_honest": rdma_start(False) + call() + setup_msg() + PROGRESS + SEND_DONE,
    "conn_ipv6": rdma_start(False, ipv6=True, ring_log=3) + call() + setup_msg(5) + PROGRESS,
    "conn_wrong_proof": rdma_start(False) + call() + setup_msg(flip=3) + PROGRESS + call(nonce=2)
    + setup_msg() + PROGRESS,
    "conn_refusals": rdma_start(False) + call(other_host=True) + call(0x80, extra=b"\x0a")
    + call(0x10, extra=u32(0x1234)) + call(0x20, extra=u16(2)) + call() + call(),
    "conn_not_yet": rdma_start(False, c2a=0, a2c=0) + call() + call(1, extra=b"\x05"),
    "conn_bad_ring": rdma_start(False) + call() + setup_msg(mode=2, extra=u64(12345)) + PROGRESS,
    "conn_ring_msg": rdma_start(False) + call() + setup_msg(type_=2) + PROGRESS,
    "conn_events": rdma_start(False) + call() + event(5) + event(4) + call() + event(6, False)
    + PROGRESS,
    "acc_honest": rdma_start(True) + ROUTE + answer() + setup_msg() + PROGRESS + SEND_DONE,
    "acc_rejected": rdma_start(True, ipv6=True) + ROUTE + answer(True, code=4),
    "acc_retry": rdma_start(True) + ROUTE + answer(True, code=1) + PROGRESS + ROUTE,
    "acc_wrong_proof": rdma_start(True) + ROUTE + answer(flip=1),
    "acc_counts_lie": rdma_start(True) + ROUTE + answer(mode=1, extra=b"\x10") + setup_msg(3)
    + PROGRESS,
    "acc_malformed": rdma_start(True) + ROUTE + answer(mode=0x80, extra=b"\x20"),
    "acc_proof_for_ring": rdma_start(True) + ROUTE + answer() + setup_msg(type_=1) + PROGRESS,
    "acc_events": rdma_start(True) + event(0) + ROUTE + event(4) + ROUTE + answer() + event(5)
    + SEND_FAILED + PROGRESS,
}

# The findings (docs/design/fuzzing.md), written as programs; the fuzzer's
# own reproducers are copied into regressions/<target>/ as they are.
STREAM_REGRESSIONS = {
    # F1: 512 bytes read from TCP, then SWITCH at 0: the TCP limit wraps.
    "finding_F1_switch_behind": tcp_read(512) + typed(SWITCH, 0),
    # F2: on the ring from offset 0, 100 bytes consumed, then REVERT ending at 50.
    "finding_F2_revert_behind": typed(SWITCH, 0) + tcp_read(1) + ring_read(100, False)
    + typed(REVERT, 0, 50) + ring_read(0),
}


RDMA_MSG_REGRESSIONS = {
    # F6: our send queue full of credit writes, then a CREDIT_REQ, 16 one-byte
    # writes and an OFFER at their end, all in the CQ before a poll: the
    # CREDIT_REQ's answer polled again and checked the OFFER before the writes.
    "finding_F6_nested_poll": rdma_setup(depth=32) + reader(0, poll=False, wake=False) * 32
    + peer_send(M_CREDIT_REQ, 2, u64(999)) + peer_write(1) * 16 + offer(100) + POLL + reader(1)
    + ADAPTER_DONE * 32 + POLL + reader(200),
    # F7 (the harness): 70 honest offers, each pulled, read and credited
    # before the next; the harness kept only the first 64 it was sent, so
    # the 65th's READ was "outside every offer".
    "finding_F7_offers_past_64": rdma_setup()
    + (offer(100) + reader(100) + ADAPTER_DONE * 2 + reader(100) + ADAPTER_DONE) * 70,
    # F8: 16 credit writes fill our send queue; an offer of 5000 bytes is
    # taken; then CUT, an offer after it, and room: the first READ's post
    # polls for room, acts on the CUT and the new offer (in the old one's
    # slot), and the reader was told 5000 bytes of a 4 KiB ring.
    "finding_F8_offer_after_cut_in_pull": rdma_setup(ring_log=0, depth=16)
    + reader(0, poll=False, wake=False) * 16 + offer(5000) + POLL + peer_send(M_CUT) + offer(100)
    + ADAPTER_DONE * 15 + reader(5000, poll=False),
}

RDMA_SETUP_REGRESSIONS = {
    # F5: a PROOF whose ring size is not a power of two failed the connector
    # with reason no-resources, not handshake-malformed.
    "finding_F5_bad_ring_reason": RDMA_SETUP["conn_bad_ring"],
}


def main():
    for kind, target, seeds in (("corpus", "ring", RING), ("corpus", "ring_attach", ATTACH),
                                ("corpus", "stream", STREAM),
                                ("corpus", "rdma_proof", PROOF),
                                ("corpus", "rdma_msg", RDMA_MSG),
                                ("corpus", "rdma_setup", RDMA_SETUP),
                                ("regressions", "stream", STREAM_REGRESSIONS),
                                ("regressions", "rdma_msg", RDMA_MSG_REGRESSIONS),
                                ("regressions", "rdma_setup", RDMA_SETUP_REGRESSIONS)):
        d = os.path.join(HERE, kind, target)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)


if __name__ == "__main__":
    main()
