"""Minimal safetensors reader/writer (numpy only; no `safetensors` package needed).

Format: 8-byte little-endian u64 N, then N bytes of UTF-8 JSON header
  {"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...}
padded with spaces so that N is a multiple of 8, then the raw little-endian tensor bytes.
data_offsets are relative to the first byte after the header.

Writing is deterministic: tensors are laid out in sorted name order and the header is
serialised with sorted keys, so equal inputs give byte-identical files.
"""
import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
}
_BY_NUMPY = {v: k for k, v in _DTYPES.items()}


def _dtype_name(arr):
    dt = arr.dtype.newbyteorder("<")
    if dt not in _BY_NUMPY:
        raise TypeError("unsupported dtype %s" % arr.dtype)
    return _BY_NUMPY[dt]


def serialize(tensors, metadata=None):
    """tensors: {name: np.ndarray}; metadata: {str: str}. Returns the file bytes."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata must map str to str (%r)" % (k,))
        header["__metadata__"] = dict(metadata)
    chunks = []
    offset = 0
    for name in sorted(tensors):
        if name == "__metadata__":
            raise ValueError("reserved tensor name")
        arr = np.asarray(tensors[name])
        dname = _dtype_name(arr)
        raw = np.ascontiguousarray(arr, dtype=_DTYPES[dname]).tobytes()
        header[name] = {"dtype": dname, "shape": [int(d) for d in arr.shape],
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hbytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((-len(hbytes)) % 8)
    return struct.pack("<Q", len(hbytes)) + hbytes + b"".join(chunks)


def save_file(tensors, path, metadata=None):
    data = serialize(tensors, metadata)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def deserialize(data):
    """Returns (tensors {name: np.ndarray}, metadata {str: str}). Validates the layout."""
    if len(data) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("header length %d exceeds file size" % n)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    tensors = {}
    spans = []
    for name, info in header.items():
        dt = _DTYPES[info["dtype"]]
        shape = tuple(int(d) for d in info["shape"])
        b, e = info["data_offsets"]
        count = int(np.prod(shape)) if shape else 1
        if e - b != count * dt.itemsize or e > len(body) or b < 0:
            raise ValueError("bad data_offsets for %s" % name)
        spans.append((b, e))
        tensors[name] = np.frombuffer(body[b:e], dtype=dt).reshape(shape).copy()
    spans.sort()
    pos = 0
    for b, e in spans:  # no holes or overlaps, data fills the body exactly
        if b != pos:
            raise ValueError("tensor data not contiguous at byte %d" % b)
        pos = e
    if pos != len(body):
        raise ValueError("trailing bytes after tensor data")
    return tensors, metadata


def load_file(path):
    with open(path, "rb") as f:
        return deserialize(f.read())
