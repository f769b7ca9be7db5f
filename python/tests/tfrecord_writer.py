"""A small TFRecord + tf.train.Example writer for the tests (no TensorFlow needed).

TFRecord framing (tensorflow/core/lib/io/record_writer.cc): uint64 length (little-endian),
uint32 masked CRC-32C of the length bytes, the data, uint32 masked CRC-32C of the data.
Example encoding: tensorflow/core/example/example.proto and feature.proto (protobuf wire
format; int64 and float lists packed).
"""

from __future__ import annotations

import struct
from typing import Dict, Iterable, List, Union

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked_crc(length)) + record + struct.pack("<I", masked_crc(record))


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # length-delimited
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


Value = Union[List[int], List[float], List[bytes]]


def example(features: Dict[str, tuple]) -> bytes:
    """features: name -> ("int64" | "float" | "bytes", [values])."""
    entries = b""
    for name, (kind, values) in features.items():
        if kind == "bytes":
            feature = _field(1, b"".join(_field(1, v) for v in values))
        elif kind == "float":
            feature = _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)) if values else b"")
        else:
            feature = _field(3, _field(1, b"".join(_varint(v) for v in values)) if values else b"")
        entries += _field(1, _field(1, name.encode()) + _field(2, feature))
    return _field(1, entries)


def id_record(i: int) -> bytes:
    """The tests' record: id (int64), vec (float32 x4), vals (id % 5 floats), tag (id % 3
    strings), name (one string)."""
    return example({
        "id": ("int64", [i]),
        "vec": ("float", [i + 0.5, -i, i * 2.0, 1.0]),
        "vals": ("float", [i + k / 8 for k in range(i % 5)]),
        "tag": ("bytes", [f"t{i}-{k}".encode() for k in range(i % 3)]),
        "name": ("bytes", [f"record-{i}".encode()]),
    })


ID_FEATURES_YAML = """features:
  id: {dtype: int64}
  vec: {dtype: float32, shape: [4]}
  vals: {type: varlen, dtype: float32}
  tag: {type: varlen, dtype: bytes}
  name: {dtype: bytes}
"""


def write_id_file(path, ids: Iterable[int]) -> None:
    with open(path, "wb") as f:
        for i in ids:
            f.write(frame(id_record(i)))
