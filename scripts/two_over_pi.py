#!/usr/bin/env python3
"""Prints the bits of 2/pi as 32-bit words for kTwoOverPiWords (lower/renderers/spirv_math.cpp): two
zero words, then the bits of weight 2^-1, 2^-2, ... most significant first. pi comes from Machin's
formula in exact integer arithmetic (pi/4 = 4 atan(1/5) - atan(1/239)) with 64 guard bits."""

WORDS = 42
BITS = 32 * WORDS + 64


def atan_inv(n, bits):
    """atan(1/n) * 2^bits, truncated (an error of a few units)."""
    total, term, k = 0, (1 << bits) // n, 0
    while term:
        total += (-1) ** k * (term // (2 * k + 1))
        term //= n * n
        k += 1
    return total


pi = 16 * atan_inv(5, BITS) - 4 * atan_inv(239, BITS)  # pi * 2^BITS
two_over_pi = (2 << (2 * BITS)) // pi                   # (2/pi) * 2^BITS
bits = two_over_pi >> (BITS - 32 * (WORDS - 2))         # the first 32 (WORDS - 2) bits after the point
words = [0, 0] + [(bits >> (32 * (WORDS - 3 - k))) & 0xFFFFFFFF for k in range(WORDS - 2)]
for row in range(0, WORDS, 7):
    print("    " + ", ".join(f"0x{w:08x}u" for w in words[row:row + 7]) + ",")
