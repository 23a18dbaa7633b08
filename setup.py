"""Build of reduce_ops._C: C++ kernels always, CUDA kernels whenever nvcc and a CUDA torch agree.

No GPU is needed to build the CUDA code. Environment knobs:
  TORCH_CUDA_ARCH_LIST     GPU targets (default "8.0;9.0;10.0;12.0+PTX")
  MAX_JOBS                 parallel compile jobs (ninja)
  REDUCE_OPS_FORCE_CPU=1   skip the CUDA kernels
  REDUCE_OPS_REQUIRE_CUDA=1  fail instead of falling back to a CPU-only build (CI uses it)
"""
import glob
import os
import re
import subprocess
import sys

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _locate_cuda_home():
    """Point CUDA_HOME at a full toolkit before torch guesses it.

    torch derives CUDA_HOME from the directory of `nvcc` on PATH; where nvcc is a wrapper
    script (/usr/local/bin/nvcc), that guess lacks the toolkit's include/ and lib64/.
    """
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return
    for home in ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True):
        if os.path.exists(os.path.join(home, "bin", "nvcc")) and \
                os.path.exists(os.path.join(home, "include", "cuda_runtime.h")):
            os.environ["CUDA_HOME"] = home
            return


_locate_cuda_home()

import torch  # noqa: E402
from torch.utils import cpp_extension  # noqa: E402


def _cuda_library_includes():
    """Header folders of the CUDA libraries torch's headers include (cuBLAS, cuSPARSE, ...).

    A compiler-only toolkit lacks them; the nvidia-* wheels that come with a CUDA build of
    torch carry them (site-packages/nvidia/cu13/include, or nvidia/<lib>/include before CUDA 13).
    """
    home = cpp_extension.CUDA_HOME or ""
    if os.path.exists(os.path.join(home, "include", "cusparse.h")):
        return []
    found = []
    for path in sys.path:
        for inc in sorted(glob.glob(os.path.join(path, "nvidia", "*", "include"))):
            if inc not in found and (glob.glob(os.path.join(inc, "cusparse*.h")) or
                                     glob.glob(os.path.join(inc, "cublas*.h"))):
                found.append(inc)
    return found


def _nvcc_version():
    home = cpp_extension.CUDA_HOME
    if home is None:
        return None
    nvcc = os.path.join(home, "bin", "nvcc")
    try:
        out = subprocess.check_output([nvcc, "--version"], text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.search(r"release (\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _cuda_build_reason():
    """None when the CUDA kernels can be built, else why not."""
    if os.environ.get("REDUCE_OPS_FORCE_CPU") == "1":
        return "REDUCE_OPS_FORCE_CPU=1"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    nvcc = _nvcc_version()
    if nvcc is None:
        return "nvcc was not found (set CUDA_HOME)"
    torch_major = int(torch.version.cuda.split(".")[0])
    if nvcc[0] != torch_major:
        return (f"nvcc {nvcc[0]}.{nvcc[1]} and torch's CUDA {torch.version.cuda} differ in major "
                "version; install the torch build that matches nvcc (see README)")
    return None


def _extension():
    sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/cpu/*.cpp"))
    # -fno-trapping-math lets the vectorizer turn the CPU kernels' selects into blends (no code
    # here reads floating-point exception flags); -ffp-contract=off keeps a * b + c two
    # roundings, so an element's result does not depend on which instructions the target has.
    cxx_flags = ["-O3", "-std=c++20", "-fno-trapping-math", "-ffp-contract=off"]
    link_flags = []
    if sys.platform.startswith("linux"):
        # at::parallel_for is inline OpenMP in torch's headers: without -fopenmp its pragma is
        # dropped and the CPU kernels run on one thread. libgomp.so.1 is torch's own at run time
        # (the loader reuses the copy libtorch_cpu already loaded).
        cxx_flags.append("-fopenmp")
        link_flags.append("-fopenmp")
    reason = _cuda_build_reason()
    if reason is None:
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0;10.0;12.0+PTX")
        print(f"reduce_ops: building CUDA kernels for TORCH_CUDA_ARCH_LIST="
              f"{os.environ['TORCH_CUDA_ARCH_LIST']}", file=sys.stderr)
        sources += sorted(glob.glob("csrc/cuda/*.cu"))
        nvcc_flags = ["-O3", "-std=c++20", "--expt-relaxed-constexpr", "-lineinfo",
                      "-DREDUCE_OPS_WITH_CUDA"]
        return cpp_extension.CUDAExtension(
            "reduce_ops._C", sources,
            include_dirs=[os.path.join(ROOT, "csrc")] + _cuda_library_includes(),
            define_macros=[("REDUCE_OPS_WITH_CUDA", None)],
            extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
            extra_link_args=link_flags,
            py_limited_api=True)
    if os.environ.get("REDUCE_OPS_REQUIRE_CUDA") == "1":
        raise RuntimeError(f"reduce_ops: REDUCE_OPS_REQUIRE_CUDA=1 but the CUDA kernels cannot be "
                           f"built: {reason}")
    print(f"reduce_ops: building the CPU kernels only: {reason}", file=sys.stderr)
    return cpp_extension.CppExtension(
        "reduce_ops._C", sources,
        include_dirs=[os.path.join(ROOT, "csrc")],
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=link_flags,
        py_limited_api=True)


setup(
    ext_modules=[_extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
    options={"bdist_wheel": {"py_limited_api": "cp39"}},
)
