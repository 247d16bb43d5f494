"""load_tensors / save_tensors against h5py (the files are written or read by h5py here)."""

import os

import numpy as np
import pytest

import disco

h5py = pytest.importorskip("h5py")


def test_load_sharded_and_whole_from_an_h5py_file(ccl, shared_tmp):
    s, n = ccl, ccl.num_workers
    path = os.path.join(shared_tmp, "w.h5")
    w1 = np.arange(4 * n * 3, dtype="float32").reshape(4 * n, 3)
    bias = np.linspace(0, 1, 7).astype("float64")
    with h5py.File(path, "w") as f:
        f["layers/0/w1"] = w1
        f["bias"] = bias
        f["half"] = np.arange(6, dtype="float16")
        f["layers/0/w1"].attrs["shard_axis"] = 0
    loaded = s.load_tensors(path, {"layers/0/w1": None, "bias": -1, "half": 0 if 6 % n == 0 else -1})
    assert set(loaded) == {"layers/0/w1", "bias", "half"}
    for w in range(n):
        np.testing.assert_array_equal(loaded["layers/0/w1"].debug_get_from_remote(w),
                                      w1[4 * w:4 * w + 4])
        np.testing.assert_array_equal(loaded["bias"].debug_get_from_remote(w), bias)
    assert loaded["half"].debug_get_from_remote(0).dtype == np.float16


def test_save_then_h5py_reads_the_whole_tensor(ccl, shared_tmp):
    s, n = ccl, ccl.num_workers
    path = os.path.join(shared_tmp, "out.h5")
    shard = s.empty((2, 3), "int32")
    for w in range(n):
        shard.debug_copy_from(w, np.full((2, 3), w, dtype="int32"))
    whole = s.broadcast(np.arange(5, dtype="float64"))
    s.save_tensors(path, {"sharded": (shard, 0), "whole": (whole, -1)})
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(
            f["sharded"][...], np.concatenate([np.full((2, 3), w, dtype="int32") for w in range(n)]))
        np.testing.assert_array_equal(f["whole"][...], np.arange(5))
    back = s.load_tensors(path, {"sharded": 0})
    np.testing.assert_array_equal(back["sharded"].debug_get_from_remote(n - 1),
                                  np.full((2, 3), n - 1))


def test_errors_name_the_file_and_dataset(ccl, shared_tmp):
    path = os.path.join(shared_tmp, "e.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros(3)
    # Loads run on the workers: their errors are RemoteErrors at the next sync.
    with pytest.raises(disco.RemoteError, match="'missing'.*no such dataset"):
        ccl.load_tensors(path, {"missing": -1})
        ccl.sync_all()
    with pytest.raises(disco.RemoteError, match="nope.h5"):
        ccl.load_tensors(os.path.join(shared_tmp, "nope.h5"), {"x": -1})
        ccl.sync_all()
    with pytest.raises(TypeError):
        ccl.save_tensors(path, {"x": (1, 2)})
