"""Which BLAS did torch load? Reads /proc/self/maps and asks OpenBLAS about itself.

Debian's torch links libblas.so.3 (and libopenblas.so.0) resolved through update-alternatives;
bench/train_vs_torch.sh puts /usr/lib/x86_64-linux-gnu/openblas-openmp first on
LD_LIBRARY_PATH so torch gets the OpenMP OpenBLAS whatever the alternatives say. This module
reports what actually got mapped, so the benchmark output proves it.
"""
import ctypes
import os

_PARALLEL = {0: "sequential", 1: "pthreads", 2: "openmp"}


def loaded_libraries(pattern=("blas", "lapack", "mkl", "gomp", "iomp")):
    libs = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    base = os.path.basename(parts[5]).lower()
                    if any(p in base for p in pattern) and parts[5] not in libs:
                        libs.append(parts[5])
    except OSError:
        pass
    return libs


def blas_info():
    import torch  # (make sure torch's libraries are loaded)
    libs = loaded_libraries()
    info = {"libraries": sorted({os.path.realpath(p) for p in libs})}
    # PyPI's x86-64 wheels link MKL statically (nothing to see in /proc/self/maps) and use oneDNN
    # (mkldnn) for bf16 matmuls and convolutions; Debian's 1.13 has neither.
    try:
        info["mkl"] = bool(torch.backends.mkl.is_available())
        info["mkldnn"] = bool(torch.backends.mkldnn.is_available())
    except AttributeError:
        pass
    for path in libs:
        if "openblas" not in os.path.realpath(path):
            continue
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_config.restype = ctypes.c_char_p
            lib.openblas_get_corename.restype = ctypes.c_char_p
            info["openblas_config"] = lib.openblas_get_config().decode()
            info["openblas_core"] = lib.openblas_get_corename().decode()
            info["openblas_parallel"] = _PARALLEL.get(lib.openblas_get_parallel(), "unknown")
            info["openblas_threads"] = lib.openblas_get_num_threads()
            break
        except (OSError, AttributeError):
            continue
    return info


if __name__ == "__main__":
    import json
    print(json.dumps(blas_info(), indent=1))
