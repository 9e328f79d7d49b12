"""How a stored measurement keeps its samples and its record compactly, and gets them back exactly.

Samples: IEEE 754 binary64, little-endian, then zlib (a sample comes back bit for bit, so any statistic can be
recomputed). The record: :meth:`MeasurementRecord.to_json` without its samples, as compact JSON, then zlib.
GPU-free and pytest-free.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Sequence

from pytest_jetmem.measure.record import MeasurementRecord

__all__ = ["json_finite", "pack_record", "pack_samples", "unpack_record", "unpack_samples"]


def pack_samples(samples: Sequence[float]) -> bytes:
    """The samples as stored."""
    return zlib.compress(struct.pack(f"<{len(samples)}d", *samples), 6)


def _inflate(blob: object) -> bytes:
    """The bytes :func:`zlib.compress` made ``blob`` from; ValueError where ``blob`` is not such bytes."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise ValueError(f"a {type(blob).__name__} where compressed bytes were expected")
    try:
        return zlib.decompress(bytes(blob))
    except zlib.error as exc:
        raise ValueError(f"not zlib data: {exc}") from None


def unpack_samples(blob: bytes) -> tuple[float, ...]:
    """Inverse of :func:`pack_samples`; ValueError (only) for bytes it did not write."""
    raw = _inflate(blob)
    if len(raw) % 8:
        raise ValueError(f"stored samples: {len(raw)} bytes is not a whole number of binary64 values")
    return struct.unpack(f"<{len(raw) // 8}d", raw)


def json_finite(value: object) -> object:
    """``value`` with every non-finite float, in lists and dicts too, as None: JSON has no NaN or infinity, and a
    record reads null as not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [json_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    return value


def pack_record(record: MeasurementRecord) -> bytes:
    """The record without its samples (they are stored apart), as stored."""
    obj = record.to_json()
    obj.pop("samples", None)
    return zlib.compress(json.dumps(json_finite(obj), separators=(",", ":"), allow_nan=False).encode(), 6)


def unpack_record(blob: bytes, samples: Sequence[float]) -> MeasurementRecord:
    """The record :func:`pack_record` stored, with its samples put back; ValueError (RecordError where it decodes
    but is not a record) for bytes it did not write."""
    try:
        obj = json.loads(_inflate(blob).decode())
    except UnicodeDecodeError as exc:  # json.JSONDecodeError is a ValueError already
        raise ValueError(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"a JSON {type(obj).__name__} where a measurement record's object was expected")
    obj["samples"] = list(samples)
    return MeasurementRecord.from_json(obj)
