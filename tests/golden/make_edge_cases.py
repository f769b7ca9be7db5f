#!/usr/bin/env python3
"""Edge-case tf.train.Example records and what TensorFlow's tf.io.parse_example makes of them.

Writes tests/golden/edge_cases.json, which tests/tf_edge_case_test.cc replays through
ringfeed's ExampleParser. Run from the repo root with a Python that has TensorFlow:

    /work/tfvenv/bin/python tests/golden/make_edge_cases.py --out tests/golden/edge_cases.json

What it does:
  * builds ~45 serialized Examples, some with tf.train.Example, most by hand on the wire
    (unpacked and mixed encodings, duplicate keys, oneof switching, empty lists, NaN payloads,
    10-byte negative varints, unknown and malformed fields, truncations, ...);
  * for each of ~20 feature specs (VarLen, FixedLen scalar/vector/matrix with and without
    defaults, every wrong type pairing, decode_raw) calls tf.io.parse_example on the single
    record (batch of 1) and records the values (bit-exact, as little-endian bytes) or the
    error class and message;
  * computes the result ringfeed's documented semantics give (format/example_parser.h:
    protobuf semantics for the Feature message -- oneof, merging of repeated lists, packed and
    unpacked -- plus TensorFlow's kind/count/default rules), with libprotobuf (upb) parsing each
    wanted Feature message. Where that differs from TensorFlow the case is a *known divergence*:
    it must be listed in KNOWN_DIVERGENCES below with the reason, or this script fails. Such
    results carry a "ringfeed" field with the expected ringfeed result and a "divergence" text.

TensorFlow's fast parser (tensorflow/core/util/example_proto_fast_parsing.cc) is not a protobuf
parser: it reads only the first list of a Feature and only the first packed run of a list, it
skips a FixedLen key whose last duplicate is an empty Feature{} (so the earlier one is used),
it rejects protobuf-valid unknown fields in Features, map entries and before the list in a
Feature, and it accepts some protobuf-invalid input (a packed float run of 5 bytes, a truncated
unknown field at the top level, a Features length past the end of the record). The list is in
KNOWN_DIVERGENCES. Where TensorFlow and protobuf disagree, ringfeed follows protobuf, except that a
map entry holding two values is rejected (as TensorFlow does) instead of merged.

Note for anyone editing the specs: pass numeric defaults to TensorFlow as numpy arrays. TF's eager
scalar cache keys on (value, dtype) and 0.0 == -0.0, so a Python default of 0.0 after one of -0.0
came back as -0.0.
"""

import argparse
import base64
import json
import os
import struct
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# ---------------------------------------------------------------------------------------------
# Wire encoding by hand.


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field, wire):
    return varint(field << 3 | wire)


def ld(field, payload):
    return tag(field, 2) + varint(len(payload)) + payload


def f32(bits):
    return struct.pack("<I", bits)


def fbits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def floats_packed(bits):
    return ld(1, b"".join(f32(b) for b in bits))


def floats_unpacked(bits):
    return b"".join(tag(1, 5) + f32(b) for b in bits)


def ints_packed(vals):
    return ld(1, b"".join(varint(v) for v in vals))


def ints_unpacked(vals):
    return b"".join(tag(1, 0) + varint(v) for v in vals)


def bytes_list(vals):
    return b"".join(ld(1, v) for v in vals)


BYTES, FLOAT, INT64 = 1, 2, 3


def feat(kind, list_payload):
    """One list field of a Feature (a Feature may hold several, see oneof cases)."""
    return ld(kind, list_payload)


def entry(key, feature_bytes):
    """One map entry of Features.feature: {key = 1, value = 2}."""
    return ld(1, ld(1, key) + ld(2, feature_bytes))


def features(*entries):
    return ld(1, b"".join(entries))


def example(*entries):
    return features(*entries)


# Common bit patterns.
NAN_PAYLOAD = 0x7FC12345  # quiet NaN with a payload
SNAN = 0x7F800001  # signalling NaN
NEG_NAN = 0xFFA00000  # negative signalling NaN
POS_INF, NEG_INF = 0x7F800000, 0xFF800000
NEG_ZERO = 0x80000000
DENORM_MIN = 0x00000001
FLT_MAX = 0x7F7FFFFF


def proto_example(feats):
    """tf.train.Example from {key: (kind, values)} (floats as python floats)."""
    ex = tf.train.Example()
    for k, (kind, vals) in feats.items():
        f = ex.features.feature[k]
        if kind == INT64:
            f.int64_list.value.extend(vals)
        elif kind == FLOAT:
            f.float_list.value.extend(vals)
        else:
            f.bytes_list.value.extend(vals)
    return ex.SerializeToString(deterministic=True)  # map keys sorted: reproducible output


# ---------------------------------------------------------------------------------------------
# Records. Keys: "i" (int64), "f" (float), "b" (bytes); others are not in any spec.

RAW12 = bytes(range(0xF0, 0xFC))  # 12 bytes: uint8 x12, int32 x3, uint16 x6, int16 x6


def build_records():
    R = []

    def add(name, data, note):
        R.append({"name": name, "data": data, "note": note})

    full3 = example(
        entry(b"i", feat(INT64, ints_packed([INT64_MIN, INT64_MAX, -2]))),
        entry(b"f", feat(FLOAT, floats_packed([NAN_PAYLOAD, POS_INF, NEG_INF]))),
        entry(b"b", feat(BYTES, bytes_list([b"", b"a\0b", b"\xff"]))))
    full1 = proto_example({"i": (INT64, [-1]), "f": (FLOAT, [-0.0]), "b": (BYTES, [b""])})
    add("full1_proto", full1, "tf.train.Example: i=[-1] (10-byte varint), f=[-0.0], b=['']")
    add("full3", full3, "i=[INT64_MIN, INT64_MAX, -2], f=[NaN payload, +inf, -inf], b=['', 'a\\0b', '\\xff']")
    add("full4", example(
        entry(b"i", feat(INT64, ints_packed([0, 1, 2**40, -(2**40)]))),
        entry(b"f", feat(FLOAT, floats_packed([fbits(1.5), DENORM_MIN, FLT_MAX, SNAN]))),
        entry(b"b", feat(BYTES, bytes_list([b"x" * 300, b"", b"\0", b"tail"])))),
        "4 values each (2x2): denormal, FLT_MAX, signalling NaN; a 300-byte string")
    add("proto_many", proto_example({
        "f": (FLOAT, [0.1 * k for k in range(3)]), "i": (INT64, [-(10**k) for k in range(3)]),
        "b": (BYTES, [b"one", b"two", b"three"]), "other": (FLOAT, [1.0] * 50)}),
        "tf.train.Example with an extra key; 3 values each")
    add("empty_example", b"", "zero bytes: every feature missing")
    add("no_list", example(entry(b"i", b""), entry(b"f", b""), entry(b"b", b"")),
        "every key present as Feature{} (no list set): missing")
    add("empty_lists", example(entry(b"i", feat(INT64, b"")), entry(b"f", feat(FLOAT, b"")),
                               entry(b"b", feat(BYTES, b""))),
        "every list set but empty: not missing (FixedLen count error even with a default)")
    add("unpacked3", example(
        entry(b"i", feat(INT64, ints_unpacked([-1, 300, INT64_MIN]))),
        entry(b"f", feat(FLOAT, floats_unpacked([NEG_ZERO, NEG_NAN, fbits(3.25)]))),
        entry(b"b", feat(BYTES, bytes_list([b"p", b"q", b"r"])))),
        "numeric lists unpacked (one tag per value)")
    add("mixed_packed_then_unpacked", example(
        entry(b"i", feat(INT64, ints_packed([1]) + ints_unpacked([2, 3]))),
        entry(b"f", feat(FLOAT, floats_packed([fbits(1)]) + floats_unpacked([fbits(2), fbits(3)]))),
        entry(b"b", feat(BYTES, bytes_list([b"m"])))),
        "packed run then unpacked values in one list (protobuf: all values)")
    add("mixed_unpacked_then_packed", example(
        entry(b"i", feat(INT64, ints_unpacked([1]) + ints_packed([2, 3]))),
        entry(b"f", feat(FLOAT, floats_unpacked([fbits(1)]) + floats_packed([fbits(2), fbits(3)]))),
        entry(b"b", feat(BYTES, bytes_list([b"m"])))),
        "unpacked values then a packed run")
    add("two_packed_runs", example(
        entry(b"i", feat(INT64, ints_packed([1, 2]) + ints_packed([3]))),
        entry(b"f", feat(FLOAT, floats_packed([fbits(1), fbits(2)]) + floats_packed([fbits(3)]))),
        entry(b"b", feat(BYTES, bytes_list([b"m"])))),
        "two packed runs in one list")
    add("two_lists_same_kind", example(
        entry(b"i", feat(INT64, ints_packed([1])) + feat(INT64, ints_packed([2, 3]))),
        entry(b"f", feat(FLOAT, floats_packed([fbits(1)])) + feat(FLOAT, floats_packed([fbits(2), fbits(3)]))),
        entry(b"b", feat(BYTES, bytes_list([b"a"])) + feat(BYTES, bytes_list([b"b", b"c"])))),
        "each Feature holds its list field twice (protobuf merges them)")
    add("oneof_float_int_float", example(
        entry(b"f", feat(FLOAT, floats_packed([fbits(1)])) + feat(INT64, ints_packed([5]))
              + feat(FLOAT, floats_packed([fbits(2), fbits(3), fbits(4)]))),
        entry(b"i", feat(INT64, ints_packed([7]))), entry(b"b", feat(BYTES, bytes_list([b"z"])))),
        "f: float_list, int64_list, float_list (protobuf oneof: the last run, [2,3,4])")
    add("oneof_float_then_int", example(
        entry(b"f", feat(FLOAT, floats_packed([fbits(1)])) + feat(INT64, ints_packed([5, 6, 7]))),
        entry(b"i", feat(INT64, ints_packed([7]))), entry(b"b", feat(BYTES, bytes_list([b"z"])))),
        "f: float_list then int64_list (protobuf oneof: int64_list)")
    add("dup_key_last_wins", example(
        entry(b"f", feat(FLOAT, floats_packed([fbits(1), fbits(2), fbits(3)]))),
        entry(b"i", feat(INT64, ints_packed([1]))),
        entry(b"f", feat(FLOAT, floats_packed([fbits(4), fbits(5), fbits(6)]))),
        entry(b"i", feat(INT64, ints_packed([2]))),
        entry(b"b", feat(BYTES, bytes_list([b"first"]))), entry(b"b", feat(BYTES, bytes_list([b"last"])))),
        "every key twice: the last one wins")
    add("dup_key_last_empty_feature", example(
        entry(b"f", feat(FLOAT, floats_packed([fbits(1), fbits(2), fbits(3)]))), entry(b"f", b""),
        entry(b"i", feat(INT64, ints_packed([1, 2, 3]))), entry(b"i", b""),
        entry(b"b", feat(BYTES, bytes_list([b"x", b"y", b"z"]))), entry(b"b", b"")),
        "every key twice, the last as Feature{}: protobuf says missing")
    add("dup_key_last_empty_list", example(
        entry(b"f", feat(FLOAT, floats_packed([fbits(1), fbits(2), fbits(3)]))), entry(b"f", feat(FLOAT, b"")),
        entry(b"i", feat(INT64, ints_packed([1, 2, 3]))), entry(b"i", feat(INT64, b"")),
        entry(b"b", feat(BYTES, bytes_list([b"x", b"y", b"z"]))), entry(b"b", feat(BYTES, b""))),
        "every key twice, the last an empty list")
    add("dup_key_type_change", example(
        entry(b"i", feat(FLOAT, floats_packed([fbits(1)]))), entry(b"i", feat(INT64, ints_packed([9]))),
        entry(b"f", feat(INT64, ints_packed([1]))), entry(b"f", feat(FLOAT, floats_packed([fbits(9)]))),
        entry(b"b", feat(INT64, ints_packed([1]))), entry(b"b", feat(BYTES, bytes_list([b"9"])))),
        "each key first with a wrong kind, then the right one: fine")
    add("dup_key_wrong_type_last", example(
        entry(b"f", feat(FLOAT, floats_packed([fbits(1)]))), entry(b"f", feat(INT64, ints_packed([9]))),
        entry(b"i", feat(INT64, ints_packed([9]))), entry(b"b", feat(BYTES, bytes_list([b"9"])))),
        "f first right, then an int64_list: type error")
    add("dup_key_empty_feature_after_wrong_type", example(
        entry(b"f", feat(INT64, ints_packed([1]))), entry(b"f", b""),
        entry(b"i", feat(INT64, ints_packed([9]))), entry(b"b", feat(BYTES, bytes_list([b"9"])))),
        "f: an int64_list, then Feature{} (protobuf: missing)")
    add("two_features_fields", features(entry(b"i", feat(INT64, ints_packed([4, 5, 6]))))
        + features(entry(b"f", feat(FLOAT, floats_packed([fbits(7), fbits(8), fbits(9)]))),
                   entry(b"b", feat(BYTES, bytes_list([b"u", b"v", b"w"])))),
        "Example{features{i}, features{f, b}}: the two Features merge")
    add("two_features_same_key", features(entry(b"f", feat(FLOAT, floats_packed([fbits(1), fbits(2), fbits(3)]))),
                                          entry(b"i", feat(INT64, ints_packed([1]))))
        + features(entry(b"f", feat(FLOAT, floats_packed([fbits(7), fbits(8), fbits(9)]))),
                   entry(b"b", feat(BYTES, bytes_list([b"u"])))),
        "f in both Features messages: the later one wins")
    add("concatenated_examples", full3 + full1, "full3 + full1_proto concatenated: full1's values win")
    add("unknown_key_garbage", example(
        entry(b"zz", b"\xff\xff\xff\xff\x0f"), entry(b"other", feat(FLOAT, b"\x0a\x07abc")),
        entry(b"i", feat(INT64, ints_packed([1, 2, 3]))),
        entry(b"f", feat(FLOAT, floats_packed([fbits(1), fbits(2), fbits(3)]))),
        entry(b"b", feat(BYTES, bytes_list([b"1", b"2", b"3"])))),
        "keys not in the spec whose values are not valid Features: never decoded")
    add("unknown_example_fields", tag(2, 0) + varint(2**63) + tag(3, 1) + b"\0" * 8 + tag(4, 5) + b"\0" * 4
        + ld(5, b"junk") + example(entry(b"i", feat(INT64, ints_packed([1])))) + tag(15, 0) + b"\x01"
        + tag(1, 0) + b"\x05",
        "unknown fields of every wire type around Example.features, and field 1 as a varint")
    add("unknown_features_field", features(tag(2, 0) + b"\x01", entry(b"i", feat(INT64, ints_packed([1])))),
        "an unknown varint field inside Features")
    add("entry_value_before_key", example(ld(1, ld(2, feat(INT64, ints_packed([42]))) + ld(1, b"i"))),
        "map entry with the value field before the key")
    add("entry_no_value", example(ld(1, ld(1, b"i")), ld(1, ld(1, b"f")), ld(1, ld(1, b"b"))),
        "map entries with a key but no value (protobuf: the value is Feature{})")
    add("entry_extra_field", example(ld(1, ld(1, b"i") + ld(2, feat(INT64, ints_packed([3]))) + tag(3, 0) + b"\x01")),
        "map entry with an unknown field 3")
    add("entry_two_values", example(ld(1, ld(1, b"f") + ld(2, feat(FLOAT, floats_packed([fbits(4)])))
                                           + ld(2, feat(FLOAT, floats_packed([fbits(5)]))))),
        "map entry with the value field twice: TF rejects the Example and so does ringfeed (protobuf would "
        "merge the two Features into [4, 5])")
    add("entry_no_key", example(ld(1, ld(2, feat(INT64, ints_packed([1])))), entry(b"i", feat(INT64, ints_packed([2])))),
        "map entry without a key (key ''), then i")
    add("feature_unknown_field_first", example(entry(b"i", tag(4, 0) + b"\x01" + feat(INT64, ints_packed([1])))),
        "i's Feature starts with an unknown field 4")
    add("feature_unknown_field_after", example(entry(b"i", feat(INT64, ints_packed([1])) + tag(4, 0) + b"\x01")),
        "i's Feature ends with an unknown field 4")
    add("list_unknown_field", example(entry(b"i", feat(INT64, ints_packed([1]) + tag(2, 0) + b"\x07"))),
        "an unknown field 2 after the values inside an Int64List")
    add("varint_10th_byte_overflow", example(entry(b"i", feat(INT64, ld(1, b"\xff" * 9 + b"\x7f")))),
        "a 10-byte varint whose last byte has bits beyond 2^64 (protobuf drops them: -1)")
    add("varint_11_bytes", example(entry(b"i", feat(INT64, ld(1, b"\xff" * 10 + b"\x01")))),
        "an 11-byte varint: malformed")
    add("packed_float_5_bytes", example(entry(b"f", feat(FLOAT, ld(1, f32(fbits(1)) + b"\x01")))),
        "a packed float run of 5 bytes: malformed for protobuf")
    add("packed_float_len_past_list", example(entry(b"f", feat(FLOAT, b"\x0a\x08" + f32(0)))),
        "packed run length 8 with 4 bytes left in the list")
    add("truncated_in_list", full3[:30], "full3 cut 30 bytes in (inside i's packed run)")
    add("truncated_in_key", full3[:5], "full3 cut inside the first key")
    add("truncated_unknown_top", example(entry(b"i", feat(INT64, ints_packed([1])))) + ld(9, b"abcdef")[:4],
        "a valid Example followed by a length-delimited unknown field cut short")
    add("features_len_past_end", b"\x0a\x7f" + entry(b"i", feat(INT64, ints_packed([1]))),
        "Example.features length 127 with fewer bytes present")
    add("group_field", example(entry(b"i", feat(INT64, ints_packed([1])))) + tag(5, 3) + tag(5, 4),
        "a (deprecated) group at the top level")
    add("raw12", example(entry(b"b", feat(BYTES, bytes_list([RAW12]))),
                         entry(b"i", feat(INT64, ints_packed([5]))), entry(b"f", feat(FLOAT, floats_packed([0])))),
        "b holds one 12-byte string for decode_raw")
    add("count_2", example(entry(b"i", feat(INT64, ints_packed([1, 2]))),
                           entry(b"f", feat(FLOAT, floats_packed([0, 0]))), entry(b"b", feat(BYTES, bytes_list([b"", b""])))),
        "2 values each: shape [3] count error")
    add("proto_mixed_missing", proto_example({"f": (FLOAT, [1.0, float("nan"), -2.5]), "b": (BYTES, [b"\0\0", b"", b"q"])}),
        "tf.train.Example without i")
    return R


# ---------------------------------------------------------------------------------------------
# Specs. Each feature: name, type fixed|var, dtype, shape, optional default, optional decode_raw.


def F(name, dtype, shape=(), default=None, raw=False):
    d = {"name": name, "type": "fixed", "dtype": dtype, "shape": list(shape)}
    if default is not None:
        d["default"] = default
    if raw:
        d["decode_raw"] = True
    return d


def V(name, dtype):
    return {"name": name, "type": "var", "dtype": dtype, "shape": []}


SPECS = {
    "var": [V("i", "int64"), V("f", "float32"), V("b", "bytes")],
    "var_only_f": [V("f", "float32")],
    "scalar": [F("i", "int64"), F("f", "float32"), F("b", "bytes")],
    "scalar_default": [F("i", "int64", default=[-7]), F("f", "float32", default=[-0.0]),
                       F("b", "bytes", default=["ZGZsdAB4"])],  # b"dflt\0x"
    "vec3": [F("i", "int64", [3]), F("f", "float32", [3]), F("b", "bytes", [3])],
    "vec3_default": [F("i", "int64", [3], default=[INT64_MIN, 0, INT64_MAX]),
                     F("f", "float32", [3], default=[1.5, float("-inf"), 2.0**-149]),
                     F("b", "bytes", [3], default=["", "eA==", "AA=="])],  # '', 'x', '\0'
    "mat2x2": [F("i", "int64", [2, 2]), F("f", "float32", [2, 2]), F("b", "bytes", [2, 2])],
    "mat2x2_default": [F("i", "int64", [2, 2], default=[1, 2, 3, 4]), F("f", "float32", [1, 2], default=[0.25, 0.5]),
                       F("b", "bytes", [2, 1], default=["YQ==", "Yg=="])],
    "empty_shape": [F("i", "int64", [0]), F("f", "float32", [0, 3]), F("b", "bytes", [0])],
    # Every wrong pairing of list kind and spec dtype, VarLen and FixedLen (with defaults, so a
    # missing key does not mask the type error).
    "var_swap_a": [V("i", "float32"), V("f", "bytes"), V("b", "int64")],
    "var_swap_b": [V("i", "bytes"), V("f", "int64"), V("b", "float32")],
    "fixed_swap_a": [F("i", "float32", default=[0.0]), F("f", "bytes", default=[""]), F("b", "int64", default=[0])],
    "fixed_swap_b": [F("i", "bytes", default=[""]), F("f", "int64", default=[0]), F("b", "float32", default=[0.0])],
    # decode_raw of b (TensorFlow: FixedLen bytes [] then tf.io.decode_raw and a reshape).
    "raw_uint8_12": [F("b", "uint8", [12], raw=True)],
    "raw_int32_3": [F("b", "int32", [3], raw=True)],
    "raw_uint16_2x3": [F("b", "uint16", [2, 3], raw=True)],
    "raw_int16_4": [F("b", "int16", [4], raw=True)],
    "raw_float64_1": [F("b", "float64", [1], raw=True)],
    "raw_int8_12_with_var": [F("b", "int8", [12], raw=True), V("i", "int64")],
}

TF_DTYPES = {"int64": tf.int64, "float32": tf.float32, "bytes": tf.string, "uint8": tf.uint8, "int8": tf.int8,
             "uint16": tf.uint16, "int16": tf.int16, "int32": tf.int32, "float64": tf.float64}
NP_DTYPES = {"int64": "<i8", "float32": "<f4", "uint8": "u1", "int8": "i1", "uint16": "<u2", "int16": "<i2",
             "int32": "<i4", "float64": "<f8"}
LIST_KIND = {"int64": INT64, "float32": FLOAT, "bytes": BYTES}
KIND_NAME = {INT64: "int64", FLOAT: "float", BYTES: "bytes"}


def default_values(spec):
    d = spec["default"]
    if spec["dtype"] == "bytes":
        return [base64.b64decode(x) for x in d]
    return d


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def encode_feature_result(dtype, values):
    """values: numpy array (numeric) or list of bytes."""
    if dtype == "bytes":
        return {"strings": [base64.b64encode(v).decode() for v in values]}
    arr = np.ascontiguousarray(np.asarray(values, dtype=NP_DTYPES[dtype]).reshape(-1))
    out = {"data": base64.b64encode(arr.tobytes()).decode(), "count": int(arr.size)}
    if dtype == "float32":
        out["values"] = [f"{x!r}/0x{b:08x}" for x, b in zip(arr.tolist(), arr.view("<u4").tolist())]
    else:
        out["values"] = arr.tolist()
    return out


def short_error(e):
    msg = str(e)
    if msg.startswith("{{function_node"):
        msg = msg[msg.index("}}") + 2:].strip()
    return msg.split(" [Op:")[0].strip()


def run_tf(record, spec):
    tf_spec = {}
    for s in spec:
        if s["type"] == "var":
            tf_spec[s["name"]] = tf.io.VarLenFeature(TF_DTYPES[s["dtype"]])
        elif s.get("decode_raw"):
            tf_spec[s["name"]] = tf.io.FixedLenFeature([], tf.string)
        else:
            dv = None
            if "default" in s:
                # Numeric defaults as numpy arrays, never Python scalars: TF's eager scalar cache
                # keys on (value, dtype), and 0.0 == -0.0, so a default of 0.0 after one of -0.0
                # came back as -0.0.
                dv = default_values(s)
                if s["dtype"] != "bytes":
                    dv = np.asarray(dv, dtype=NP_DTYPES[s["dtype"]]).reshape(s["shape"])
                else:
                    dv = np.asarray(dv, dtype=object).reshape(s["shape"])
            tf_spec[s["name"]] = tf.io.FixedLenFeature(s["shape"], TF_DTYPES[s["dtype"]], default_value=dv)
    try:
        parsed = tf.io.parse_example(tf.constant([record]), tf_spec)
        out = {}
        for s in spec:
            t = parsed[s["name"]]
            if s["type"] == "var":
                vals = t.values.numpy()
                assert t.dense_shape.numpy()[0] == 1
            elif s.get("decode_raw"):
                raw = tf.io.decode_raw(t, TF_DTYPES[s["dtype"]], little_endian=True)
                vals = tf.reshape(raw, [1] + s["shape"]).numpy()[0]
            else:
                vals = t.numpy()[0]
            if s["dtype"] == "bytes":
                vals = [bytes(v) for v in np.asarray(vals, dtype=object).reshape(-1)]
            out[s["name"]] = encode_feature_result(s["dtype"], vals)
        return {"ok": True, "features": out}
    except (tf.errors.InvalidArgumentError, ValueError) as e:
        return {"ok": False, "class": type(e).__name__, "message": short_error(e)}


# ---------------------------------------------------------------------------------------------
# The documented ringfeed semantics, built on protobuf (upb) for each wanted Feature message.


class Malformed(Exception):
    pass


def read_varint(buf, p):
    result, shift = 0, 0
    while True:
        if p >= len(buf) or shift >= 70:
            raise Malformed("varint")
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & ((1 << 64) - 1), p
        shift += 7


def read_fields(buf):
    """Yields (field, wire, payload bytes or None) for each field of a message; raises Malformed."""
    p = 0
    while p < len(buf):
        t, p = read_varint(buf, p)
        field, wire = t >> 3, t & 7
        if field == 0 or field > 0x1FFFFFFF:
            raise Malformed("tag")
        if wire == 0:
            _, p = read_varint(buf, p)
            yield field, wire, None
        elif wire == 1:
            if p + 8 > len(buf):
                raise Malformed("fixed64")
            p += 8
            yield field, wire, None
        elif wire == 5:
            if p + 4 > len(buf):
                raise Malformed("fixed32")
            p += 4
            yield field, wire, None
        elif wire == 2:
            n, p = read_varint(buf, p)
            if n > len(buf) - p:
                raise Malformed("length")
            yield field, wire, buf[p:p + n]
            p += n
        else:
            raise Malformed("group")


def locate_features(record):
    """{key: Feature bytes} with protobuf map semantics (last entry wins, Features merge)."""
    found = {}
    for field, wire, payload in read_fields(record):
        if field != 1 or wire != 2:
            continue
        for f2, w2, entry_bytes in read_fields(payload):
            if f2 != 1 or w2 != 2:
                continue
            key, value, nvalues = b"", b"", 0
            for f3, w3, pl in read_fields(entry_bytes):
                if f3 == 1 and w3 == 2:
                    key = pl
                elif f3 == 2 and w3 == 2:
                    value = pl
                    nvalues += 1
            if nvalues > 1:
                raise Malformed("map entry with two values")
            found[key] = value
    return found


def model(record, spec):
    """Returns (result, error_keys) as ringfeed's documented semantics define them."""
    try:
        located = locate_features(record)
    except Malformed as e:
        return {"ok": False, "class": "Malformed", "message": str(e)}, [""]
    out, errors = {}, []
    for s in spec:
        name, dtype = s["name"], s["dtype"]
        raw = s.get("decode_raw", False)
        want = BYTES if raw else LIST_KIND[dtype]
        fb = located.get(name.encode())
        kind = None
        if fb is not None:
            try:
                feature = tf.train.Feature.FromString(fb)
            except Exception:  # protobuf DecodeError
                errors.append(name)
                continue
            kind = {"bytes_list": BYTES, "float_list": FLOAT, "int64_list": INT64, None: None}[feature.WhichOneof("kind")]
        if kind is None:  # missing
            if s["type"] == "var":
                out[name] = encode_feature_result(dtype, [] if dtype == "bytes" else np.zeros(0))
            elif "default" in s:
                d = default_values(s)
                n = numel(s["shape"])
                out[name] = encode_feature_result(dtype, d * n if len(d) == 1 else d)
            else:
                errors.append(name)
            continue
        if kind != want:
            errors.append(name)
            continue
        if kind == BYTES:
            vals = list(feature.bytes_list.value)
        elif kind == FLOAT:
            ser = feature.float_list.SerializeToString()  # packed: keeps the bits (NaN payloads)
            _, p = read_varint(ser, 1) if ser else (0, 0)
            vals = np.frombuffer(ser[p:], dtype="<f4") if ser else np.zeros(0, dtype="<f4")
        else:
            vals = np.asarray([v for v in feature.int64_list.value], dtype="<i8")
        if raw:
            n = numel(s["shape"]) * np.dtype(NP_DTYPES[dtype]).itemsize
            if len(vals) != 1 or len(vals[0]) != n:
                errors.append(name)
                continue
            out[name] = encode_feature_result(dtype, np.frombuffer(vals[0], dtype=NP_DTYPES[dtype]))
            continue
        if s["type"] == "fixed" and len(vals) != numel(s["shape"]):
            errors.append(name)
            continue
        out[name] = encode_feature_result(dtype, vals)
    if errors:
        return {"ok": False, "class": "ringfeed", "message": "errors in " + ", ".join(errors)}, errors
    return {"ok": True, "features": out}, []


def same(a, b):
    if a["ok"] != b["ok"]:
        return False
    return not a["ok"] or a["features"] == b["features"]


# (record, spec or "*") -> why ringfeed's result differs from tf.io.parse_example's.
KNOWN_DIVERGENCES = {
    ("mixed_packed_then_unpacked", "*"):
        "TF reads only the first packed run of a numeric list and silently drops the unpacked values "
        "after it; protobuf (and ringfeed) keep all values",
    ("mixed_unpacked_then_packed", "*"):
        "TF's unpacked loop rejects the packed run that follows; protobuf (and ringfeed) accept both encodings mixed",
    ("two_packed_runs", "*"):
        "TF reads only the first packed run; protobuf (and ringfeed) concatenate the runs",
    ("two_lists_same_kind", "*"):
        "TF reads only the first list field of a Feature; protobuf (and ringfeed) merge repeated lists",
    ("oneof_float_int_float", "*"):
        "TF takes the kind and values of the first list field; protobuf oneof semantics (and ringfeed) use the "
        "last run (float_list [2,3,4])",
    ("oneof_float_then_int", "*"):
        "TF takes the first list field (float_list [1]); protobuf oneof (and ringfeed): the last, int64_list",
    ("dup_key_last_empty_feature", "*"):
        "for a FixedLen key TF ignores a later duplicate that is Feature{} and uses the earlier value; protobuf "
        "map semantics (and ringfeed): the last entry wins, Feature{} is missing (default or error)",
    ("dup_key_empty_feature_after_wrong_type", "*"):
        "as dup_key_last_empty_feature: TF uses the earlier int64_list (type error); ringfeed: missing",
    ("entry_no_value", "*"):
        "TF requires both key and value in a map entry; protobuf (and ringfeed): the value is Feature{}, missing",
    ("entry_extra_field", "*"):
        "TF rejects an unknown field in a map entry; protobuf (and ringfeed) skip it",
    ("entry_no_key", "*"):
        "TF requires both key and value in a map entry; protobuf (and ringfeed): the key is ''",
    ("unknown_features_field", "*"):
        "TF rejects an unknown field in Features; protobuf (and ringfeed) skip it",
    ("feature_unknown_field_first", "*"):
        "TF reads the kind from the first byte of a Feature ('Unsupported datatype'); protobuf (and ringfeed) skip "
        "the unknown field",
    ("packed_float_5_bytes", "*"):
        "TF copies floor(5/4) floats and ignores the stray byte; protobuf (and ringfeed) reject the Example",
    ("truncated_unknown_top", "*"):
        "TF ignores the failed Skip() of a truncated unknown field; protobuf (and ringfeed) reject the Example",
    ("features_len_past_end", "*"):
        "TF reads the entries that are there when Example.features claims more bytes than the record has; "
        "protobuf (and ringfeed) reject the truncated Example",
}


# Records where python protobuf (upb) parsing the whole Example disagrees with locate_features.
PROTOBUF_QUIRKS = {
    "entry_extra_field": "upb moves a map entry that has an unknown field into the parent's unknown fields, so "
                         "the key is absent from the map; C++ libprotobuf and ringfeed skip the unknown field",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden/edge_cases.json")
    args = ap.parse_args()

    records = build_records()
    names = [r["name"] for r in records]
    assert len(set(names)) == len(names)

    # Self-check of the hand encoder: records also written by tf.train.Example must round-trip.
    ex = tf.train.Example.FromString(records[1]["data"])
    assert list(ex.features.feature["i"].int64_list.value) == [INT64_MIN, INT64_MAX, -2]

    results, divergent_seen = [], set()
    for r in records:
        # Where protobuf parses the whole record, its map must agree with locate_features.
        try:
            full = tf.train.Example.FromString(r["data"])
        except Exception:
            full = None
        try:
            located = locate_features(r["data"])
        except Malformed:
            located = None
        if full is not None and located is not None and r["name"] not in PROTOBUF_QUIRKS:
            assert {k.encode() for k in full.features.feature} == set(located), r["name"]
            for k, v in full.features.feature.items():
                assert tf.train.Feature.FromString(located[k.encode()]) == v, (r["name"], k)
        for spec_name, spec in SPECS.items():
            tf_res = run_tf(r["data"], spec)
            rf_res, error_keys = model(r["data"], spec)
            item = {"record": r["name"], "spec": spec_name, "tf": tf_res}
            if not rf_res["ok"]:
                item["error_keys"] = error_keys
            why = KNOWN_DIVERGENCES.get((r["name"], spec_name)) or KNOWN_DIVERGENCES.get((r["name"], "*"))
            if not same(tf_res, rf_res):
                if why is None:
                    sys.exit(f"unlisted divergence: record {r['name']} spec {spec_name}\n TF: {tf_res}\n model: {rf_res}")
                item["ringfeed"] = rf_res
                item["divergence"] = why
                divergent_seen.add(r["name"])
            results.append(item)
    unused = {k[0] for k in KNOWN_DIVERGENCES} - divergent_seen
    if unused:
        sys.exit(f"KNOWN_DIVERGENCES lists records that do not diverge: {sorted(unused)}")

    # Float defaults also as float32 bit patterns (JSON has no -inf/NaN; bits are exact).
    specs_out = {}
    for name, spec in SPECS.items():
        specs_out[name] = []
        for s in spec:
            s = dict(s)
            if s["dtype"] == "float32" and "default" in s:
                s["default_f32_bits"] = [fbits(x) for x in s["default"]]
                s["default"] = [repr(x) for x in s["default"]]
            specs_out[name].append(s)
    doc = {
        "tensorflow": tf.__version__,
        "generator": "tests/golden/make_edge_cases.py",
        "specs": specs_out,
        "records": [{"name": r["name"], "note": r["note"], "data": base64.b64encode(r["data"]).decode()}
                    for r in records],
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True, allow_nan=False)
        f.write("\n")
    n_div = sum(1 for x in results if "divergence" in x)
    n_err = sum(1 for x in results if not x["tf"]["ok"])
    print(f"{len(records)} records x {len(SPECS)} specs = {len(results)} results; TF errors {n_err}; "
          f"known divergences {n_div} (records: {sorted(divergent_seen)})")


if __name__ == "__main__":
    main()
