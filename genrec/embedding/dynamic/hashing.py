"""Stable, vectorised hashing of raw IDs: string IDs to int64, slot positions, owners, deterministic row init.

Everything here is a pure function of its inputs (no process state, no Python ``hash``), so a resumed, re-sharded
or replayed run computes the same values on any machine:

- :func:`string_ids`: a string ID's raw int64 ID is the first 8 bytes of ``blake2b(utf8(s), digest_size=8)`` read
  as a little-endian signed integer (two different strings collide with probability ~2^-64 per pair).
- :func:`mix64`: SplitMix64's finaliser (Steele, Lea & Flood 2014) of ``id + seed * 0x9E3779B97F4A7C15`` in uint64
  arithmetic: a bijection on 64-bit words whose output bits all depend on every input bit.
- :func:`owner`: the process that owns an ID's row, ``mix64(id, OWNER_SEED) mod world_size``.
- :func:`init_rows`: a never-seen row's initial value from (table seed, raw ID, column pair) through a
  counter-based hash (the Philox idea, with SplitMix64 as the round function): uniform in ``[-bound, bound)``.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_COLUMN = np.uint64(0xD1B54A32D192ED03)
#: seed of the owner hash (fixed: it decides which process holds a row, whatever the table seed)
OWNER_SEED = 0x5EED_0F_0BE4


def string_ids(strings: Iterable[str]) -> np.ndarray:
    """String IDs -> ``(N,)`` int64 raw IDs (blake2b, 8 bytes, little-endian, signed)."""
    digests = b"".join(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest() for s in strings)
    return np.frombuffer(digests, dtype="<i8").astype(np.int64)


def mix64(ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """``(*,)`` int64 or uint64 -> ``(*,)`` uint64: SplitMix64 of ``id + seed * golden``."""
    with np.errstate(over="ignore"):
        x = np.asarray(ids).view(np.uint64) + np.uint64(seed % 2**64) * _GOLDEN
        shifted = np.empty_like(x)
        for shift, multiplier in ((30, _M1), (27, _M2)):
            np.right_shift(x, np.uint64(shift), out=shifted)
            np.bitwise_xor(x, shifted, out=x)
            np.multiply(x, multiplier, out=x)
        np.right_shift(x, np.uint64(31), out=shifted)
        return np.bitwise_xor(x, shifted, out=x)


def owner(ids: np.ndarray, world_size: int) -> np.ndarray:
    """``(*,)`` int64 raw IDs -> ``(*,)`` int64 rank in ``[0, world_size)`` that owns each ID's row."""
    return (mix64(ids, OWNER_SEED) % np.uint64(world_size)).astype(np.int64)


def uniform01(ids: np.ndarray, seed: int, salt: int = 0) -> np.ndarray:
    """``(*,)`` int64 -> ``(*,)`` float64 in ``[0, 1)`` from 53 bits of ``mix64(mix64(id, seed) + salt)``."""
    with np.errstate(over="ignore"):
        x = mix64(mix64(ids, seed) + np.uint64(salt % 2**64) * _COLUMN)
    return (x >> np.uint64(11)).astype(np.float64) * 2.0**-53


def init_rows(ids: np.ndarray, dim: int, seed: int, bound: float) -> np.ndarray:
    """``(N,)`` int64 raw IDs -> ``(N, dim)`` float32 rows uniform in ``[-bound, bound)``: with
    ``h = mix64(mix64(id_i, seed) + (k + 1) * C)``, element ``(i, 2k)`` takes bits 40..63 of ``h`` and element
    ``(i, 2k + 1)`` bits 8..31 (24 bits each: exact in float32)."""
    ids = np.asarray(ids, dtype=np.int64)
    pairs = (dim + 1) // 2
    with np.errstate(over="ignore"):
        base = mix64(ids, seed)[:, None] + (np.arange(1, pairs + 1, dtype=np.uint64) * _COLUMN)[None, :]
    h = mix64(base)  # (N, pairs)
    out = np.empty((len(ids), 2 * pairs), dtype=np.float32)
    out[:, 0::2] = h >> np.uint64(40)
    out[:, 1::2] = (h >> np.uint64(8)) & np.uint64(0xFFFFFF)
    out = out[:, :dim]
    out *= np.float32(2 * bound * 2.0**-24)  # (bits / 2^24) * 2 * bound in one multiply
    out -= np.float32(bound)
    return np.ascontiguousarray(out)
