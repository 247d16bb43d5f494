"""Reading and writing safetensors files with numpy only (no safetensors package).

The format (https://github.com/huggingface/safetensors): 8 bytes little-endian u64 N, then N
bytes of JSON header, then the data. The header maps each tensor name to
{"dtype": "F32"|"F16"|"BF16"|..., "shape": [...], "data_offsets": [begin, end]} with offsets
relative to the start of the data; an optional "__metadata__" maps strings to strings. The
reference implementation pads the header with spaces so that the data starts 8-byte aligned.
bfloat16 has no numpy dtype: it is held as uint16 bit patterns (the upper half of a float32).
"""

import json
import os
import struct

import numpy as np

# safetensors dtype name -> numpy dtype of the stored bytes (BF16 as raw uint16)
DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
STORAGE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bfloat16 bit patterns, rounded to nearest even (as torch does)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(x):
    """float32 values rounded to the nearest bfloat16, returned as float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def encode(x, dtype):
    """float32 array -> (safetensors dtype name, stored array); dtype float32|float16|bfloat16."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "float32":
        return "F32", x.astype("<f4")
    if dtype == "float16":
        return "F16", x.astype("<f2")
    if dtype == "bfloat16":
        return "BF16", f32_to_bf16_bits(x)
    raise ValueError(f"unknown dtype {dtype}")


def write(path, tensors, metadata=None):
    """tensors: {name: (st_dtype, numpy array of the stored dtype)} in file order."""
    header, offset, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, (st_dtype, arr) in tensors.items():
        arr = np.ascontiguousarray(arr, dtype=DTYPES[st_dtype])
        data = arr.tobytes()
        header[name] = {"dtype": st_dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)  # data starts 8-byte aligned, as the reference pads it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


class FormatError(ValueError):
    pass


def read_header(path):
    """(header dict without __metadata__, metadata, data start offset, file size); strict checks."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise FormatError(f"{path}: shorter than the 8-byte header size")
        (n,) = struct.unpack("<Q", raw)
        size = os.fstat(f.fileno()).st_size
        if 8 + n > size:
            raise FormatError(f"{path}: header of {n} bytes runs past the end of the file")
        header = json.loads(f.read(n).decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    return header, metadata, 8 + n, size


def read(path, names=None):
    """{name: float32 numpy array} (or the raw stored dtype for integer tensors)."""
    header, _, start, size = read_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            dt = DTYPES.get(info["dtype"])
            if dt is None:
                raise FormatError(f"{path}: tensor {name!r} has unknown dtype {info['dtype']}")
            begin, end = info["data_offsets"]
            count = int(np.prod(info["shape"], dtype=np.int64))
            if end - begin != count * dt.itemsize:
                raise FormatError(f"{path}: tensor {name!r} of shape {info['shape']} "
                                  f"{info['dtype']} has {end - begin} bytes")
            if start + end > size:
                raise FormatError(f"{path}: tensor {name!r} runs past the end of the file "
                                  f"(truncated?)")
            f.seek(start + begin)
            arr = np.frombuffer(f.read(end - begin), dtype=dt).reshape(info["shape"])
            if info["dtype"] == "BF16":
                arr = bf16_bits_to_f32(arr)
            elif info["dtype"] in ("F16", "F64"):
                arr = arr.astype(np.float32)
            out[name] = np.array(arr)  # writable copy
    return out
