#!/usr/bin/python3
"""HDF5 fixtures for tests/mpi/h5_test.cc, written with plain h5py, and checks of files disco saved.

  h5_fixtures.py write DIR
      fixtures.h5 (every dtype, bfloat16 three ways, groups, a shard_axis attribute, bad types),
      not_hdf5.h5 (text) and truncated.h5 (fixtures.h5 cut in half).
  h5_fixtures.py check FILE DATASET:DTYPE:D0xD1x... [...]
      exits 1 unless FILE holds each DATASET with that dtype and shape (empty: a scalar), every
      element equal to the formula below, stored as h5py and disco agree (bfloat16: uint16 data
      with the attribute dtype="bfloat16").

Element i (in C order) of every fixture is v = (7 * i + 3) % 100; signed integers hold v - 50,
unsigned ones v, floating types (v - 50) / 4 (exact in float16 and bfloat16).
"""
import os
import sys

import h5py
import numpy as np

SHAPE = (12, 24, 12)
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]


def values(dtype, shape):
    v = (7 * np.arange(int(np.prod(shape)), dtype=np.int64) + 3) % 100
    if dtype.startswith("int"):
        v = v - 50
    if dtype.startswith("float") or dtype == "bfloat16":
        return ((v - 50) / 4.0).reshape(shape)
    return v.reshape(shape)


def bf16_bits(shape):
    f = values("bfloat16", shape).astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)  # exact: no rounding needed


def write(directory):
    path = os.path.join(directory, "fixtures.h5")
    with h5py.File(path, "w") as f:
        for name in INTS + FLOATS:
            f.create_dataset("plain/" + name, data=values(name, SHAPE).astype(name))
        # bfloat16, three ways.
        d = f.create_dataset("bf16/uint16_attr", data=bf16_bits(SHAPE))
        d.attrs["dtype"] = "bfloat16"
        f.create_dataset("bf16/opaque", data=bf16_bits(SHAPE).view("V2"))
        t = h5py.h5t.IEEE_F32LE.copy()
        t.set_fields(15, 7, 8, 0, 7)
        t.set_size(2)
        t.set_ebias(127)
        space = h5py.h5s.create_simple(SHAPE)
        ds = h5py.h5d.create(f.id, b"bf16/float8exp", t, space)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, bf16_bits(SHAPE), mtype=t)
        # Layouts other than contiguous little-endian: chunked and compressed, big-endian.
        f.create_dataset("layout/gzip_float32", data=values("float32", SHAPE).astype("float32"),
                         chunks=(4, 8, 4), compression="gzip")
        f.create_dataset("layout/be_int32", data=values("int32", SHAPE).astype(">i4"))
        f.create_dataset("layout/be_float64", data=values("float64", SHAPE).astype(">f8"))
        # Names with groups, a default shard axis, a scalar.
        f.create_dataset("layers/0/w1", data=values("float32", (12, 4)).astype("float32"))
        d = f.create_dataset("with_axis", data=values("float32", SHAPE).astype("float32"))
        d.attrs["shard_axis"] = np.int64(1)
        f.create_dataset("scalar", data=np.float64(values("float64", (1,))[0]))
        # Bad cases.
        f.create_dataset("not_divisible", data=values("float32", (7, 5)).astype("float32"))
        f.create_dataset("complex", data=np.ones((4, 4), dtype=np.complex64))
        f.create_dataset("strings", data=np.array([b"ab", b"cd"]))
        f.create_group("a_group")
    # h5py's own LZF filter, which an HDF5 without h5py does not have.
    with h5py.File(os.path.join(directory, "lzf.h5"), "w") as f:
        f.create_dataset("x", data=np.ones((4, 2), "f4"), compression="lzf")
    with open(os.path.join(directory, "not_hdf5.h5"), "w") as f:
        f.write("this is not an HDF5 file\n" * 100)
    with open(path, "rb") as f:
        data = f.read()
    with open(os.path.join(directory, "truncated.h5"), "wb") as f:
        f.write(data[: len(data) // 2])


def check(path, dataset, dtype, shape):
    shape = tuple(int(x) for x in shape.split("x")) if shape else ()
    with h5py.File(path, "r") as f:
        d = f[dataset]
        if d.shape != shape:
            sys.exit("%s: shape %s, expected %s" % (dataset, d.shape, shape))
        if dtype == "bfloat16":
            if d.dtype != np.uint16 or d.attrs.get("dtype") not in ("bfloat16", b"bfloat16"):
                sys.exit("%s: stored as %s, attrs %s" % (dataset, d.dtype, dict(d.attrs)))
            ok = np.array_equal(d[()], bf16_bits(shape))
        else:
            if d.dtype != np.dtype(dtype):
                sys.exit("%s: dtype %s, expected %s" % (dataset, d.dtype, dtype))
            ok = np.array_equal(d[()], values(dtype, shape).astype(dtype))
        if not ok:
            sys.exit("%s: values differ from the formula" % dataset)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(sys.argv[2])
    else:
        for spec in sys.argv[3:]:
            check(sys.argv[2], *spec.split(":"))
