#!/usr/bin/env python3
"""Independent implementation of ringfeed's documented order algorithms (daemon/shuffle.h,
docs/architecture.md "Determinism"), written from the documentation alone. Its output,
tests/golden/shuffle_order.json, is what tests/shuffle_test.cc compares the C++ code against:
if the two disagree, either the code or the documentation is wrong.

Run: python3 tests/golden/make_shuffle_order.py > tests/golden/shuffle_order.json
"""
import json

M = (1 << 64) - 1


def splitmix64_mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, state):
        self.state = state & M

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M
        return splitmix64_mix(self.state)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M


class Xoshiro256StarStar:
    def __init__(self, seed, stream, epoch):
        sm = SplitMix64(seed ^ splitmix64_mix(((stream << 56) | epoch) & M))
        self.s = [sm.next() for _ in range(4)]

    def next(self):
        s = self.s
        result = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform_below(self, n):  # Lemire 2019
        m = self.next() * n
        low = m & M
        if low < n:
            threshold = ((1 << 64) - n) % n
            while low < threshold:
                m = self.next() * n
                low = m & M
        return m >> 64


def fisher_yates(items, rng):
    v = list(items)
    for i in range(len(v), 1, -1):
        j = rng.uniform_below(i)
        v[i - 1], v[j] = v[j], v[i - 1]
    return v


def shuffle_buffer(items, capacity, rng):
    capacity = max(capacity, 1)
    buf, out, it = [], [], iter(items)
    for x in it:
        if len(buf) < capacity:
            buf.append(x)
            continue
        if capacity == 1:
            out.append(buf[0]); buf[0] = x
        else:
            j = rng.uniform_below(len(buf)); out.append(buf[j]); buf[j] = x
    while buf:
        j = 0 if capacity == 1 else rng.uniform_below(len(buf))
        out.append(buf[j])
        buf[j] = buf[-1]
        buf.pop()
    return out


FILE_ORDER, RECORD_SHUFFLE = 1, 2
cases = {
    "file_order": [
        {"seed": seed, "epoch": epoch, "n": n,
         "order": fisher_yates(range(n), Xoshiro256StarStar(seed, FILE_ORDER, epoch))}
        for seed in (0, 42, 2**64 - 1) for epoch in (0, 1, 7) for n in (1, 2, 10, 33)
    ],
    "shuffle_buffer": [
        {"seed": seed, "epoch": epoch, "n": n, "capacity": cap,
         "order": shuffle_buffer(range(n), cap, Xoshiro256StarStar(seed, RECORD_SHUFFLE, epoch))}
        for seed in (0, 42) for epoch in (0, 3) for n in (0, 1, 17, 100) for cap in (0, 1, 2, 16, 1000)
    ],
    "raw": [
        {"seed": seed, "stream": stream, "epoch": epoch,
         "first": [str(x) for x in (lambda r: [r.next() for _ in range(4)])(Xoshiro256StarStar(seed, stream, epoch))]}
        for seed in (0, 42) for stream in (1, 2) for epoch in (0, 1)
    ],
}
print(json.dumps(cases, indent=1))
