"""PyTorch worker functions: @disco.register_func(name, tensors="torch") (tests/python/funcs.py)
get torch.Tensors sharing the registers' memory, bfloat16 included, and give torch tensors back.
Skipped, with the reason, where PyTorch is not installed (Debian: python3-torch)."""

import numpy as np
import pytest

import os  # noqa: E402

if os.environ.get("DISCO_TEST_TORCH") != "1":  # importing torch on every rank costs seconds
    pytest.skip("run by the CTest test python.torch (ctest -L torch)", allow_module_level=True)
torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")

import disco  # noqa: E402


def fetch(ref, worker=0):
    return ref.debug_get_from_remote(worker)


def test_torch_functions_get_torch_tensors_sharing_memory(sess):
    x = sess.empty((2, 3), "float32")
    sess.copy_to_worker_0(np.arange(6, dtype="float32").reshape(2, 3), x)
    small = np.ones(2, "float32")  # host tensors inside a tuple and a dict: converted too
    got = fetch(sess.get_global_func("test.torch.describe")(x, (small, {"t": small})))
    assert got == "Tensor torch.float32 (2, 3) Tensor Tensor"
    # The same memory as numpy's view of the register.
    ptr_torch = fetch(sess.get_global_func("test.torch.data_ptr")(x))
    ptr_numpy = fetch(sess.get_global_func("test.py.data_ptr")(x))
    assert ptr_torch == ptr_numpy
    sess.get_global_func("test.torch.add_inplace")(x, 10.0)
    np.testing.assert_array_equal(fetch(x), np.arange(6, dtype="float32").reshape(2, 3) + 10)


def test_torch_results_become_registers_and_non_contiguous_ones_are_copied(sess):
    x = sess.empty((2, 3), "float32")
    host = np.arange(6, dtype="float32").reshape(2, 3)
    sess.copy_to_worker_0(host, x)
    np.testing.assert_array_equal(fetch(sess.get_global_func("test.torch.scale")(x, 3.0)), host * 3)
    t = fetch(sess.get_global_func("test.torch.transposed")(x))
    np.testing.assert_array_equal(t, host.T)
    assert t.flags["C_CONTIGUOUS"]


def test_bfloat16_reaches_torch_as_bfloat16(sess):
    x = sess.empty((4,), "bfloat16")
    bits = np.array([0x3F80, 0x4000, 0xC040, 0x0000], dtype=np.uint16)  # 1, 2, -3, 0
    sess.copy_to_worker_0(disco.Tensor.from_numpy(bits, "bfloat16"), x)
    small = np.ones(2, "float32")
    assert fetch(sess.get_global_func("test.torch.describe")(x, (small, {"t": small}))).startswith(
        "Tensor torch.bfloat16 (4,)")
    y = sess.get_global_func("test.torch.scale")(x, 2.0)  # a torch.bfloat16 result
    out = fetch(y)
    np.testing.assert_array_equal(out.view(np.uint16) if out.dtype != np.uint16 else out,
                                  np.array([0x4000, 0x4080, 0xC0C0, 0x0000], dtype=np.uint16))


def test_bad_tensors_mode_is_a_value_error():
    with pytest.raises(ValueError, match="tensors must be 'numpy', 'torch' or 'dlpack'"):
        disco.register_func("test.torch.bad_mode", lambda x: x, tensors="jax")
