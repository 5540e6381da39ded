#!/usr/bin/env python3
"""Checks strata's safetensors reader and writer against the Hugging Face library.

Usage: python3 tests/io/check_safetensors_python.py build/tests/strata_test_io
Needs `pip install safetensors numpy`. Python writes a file that strata reads (and checks
inside the SafetensorsInterop test), then strata writes one that Python reads and checks here.
Registered in ctest (tests/CMakeLists.txt); scripts/install_deps.sh installs the packages.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
from safetensors import TensorSpec, safe_open, serialize_file


def bf16_bits(values):
    # Truncation is exact for these values (they have short mantissas).
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def write_from_python(path):
    f32 = (np.arange(6, dtype=np.float32) * 0.5 - 1.0).reshape(2, 3)
    bf16 = bf16_bits([1.0, -2.0, 0.5, 3.0])
    i32 = np.array([1, -2, 2147483647], dtype=np.int32)
    empty = np.zeros((0, 4), dtype=np.float32)
    i64 = np.array([3, 4], dtype=np.int64)
    arrays = {"f32": f32, "bf16": bf16, "i32": i32, "empty": empty, "i64": i64}
    dtypes = {"f32": "float32", "bf16": "bfloat16", "i32": "int32", "empty": "float32",
              "i64": "int64"}
    specs = {name: TensorSpec(dtype=dtypes[name], shape=list(a.shape), data_ptr=a.ctypes.data,
                              data_len=a.nbytes)
             for name, a in arrays.items()}
    serialize_file(specs, path, metadata={"source": "python"})


def check_from_strata(path):
    # load_file would fail on the bf16 tensor (numpy has no bfloat16), so load the others by name.
    with safe_open(path, framework="numpy") as f:
        arrays = {name: f.get_tensor(name) for name in ("w", "ids", "nothing")}
    assert arrays["w"].dtype == np.float32 and arrays["w"].shape == (3, 2), arrays["w"]
    np.testing.assert_array_equal(arrays["w"].ravel(),
                                  np.array([0.25, -1.5, 3.0, 1e-20, 42.0, -0.0], np.float32))
    assert arrays["ids"].dtype == np.int32
    np.testing.assert_array_equal(arrays["ids"], [5, -7, 0])
    assert arrays["nothing"].shape == (0,)
    with safe_open(path, framework="numpy") as f:
        assert f.metadata() == {"source": "strata", "step": "7"}, f.metadata()
        assert sorted(f.keys()) == ["h", "ids", "nothing", "w"], list(f.keys())
    # numpy has no bfloat16; check the raw bytes instead.
    with open(path, "rb") as fh:
        raw = dict(safetensors.deserialize(fh.read()))
    assert raw["h"]["dtype"] in ("BF16", "bfloat16"), raw["h"]["dtype"]
    assert list(raw["h"]["shape"]) == [2]
    np.testing.assert_array_equal(np.frombuffer(bytes(raw["h"]["data"]), np.uint16),
                                  bf16_bits([1.0, -3.0]))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        write_from_python(os.path.join(tmp, "from_python.safetensors"))
        env = dict(os.environ, STRATA_SAFETENSORS_INTEROP_DIR=tmp)
        subprocess.run([sys.argv[1], "--gtest_filter=SafetensorsInterop.*"], env=env, check=True)
        check_from_strata(os.path.join(tmp, "from_strata.safetensors"))
    print(f"safetensors {safetensors.__version__}: strata and Python agree")


if __name__ == "__main__":
    main()
