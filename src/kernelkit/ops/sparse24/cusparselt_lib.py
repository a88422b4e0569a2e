"""libcusparseLt.so.0 through ctypes: finding the library, its opaque structs and enums, checked calls.

Transcribed from ``cusparseLt.h`` of cuSPARSELt 0.8.1 (the ``nvidia-cusparselt-cu13`` 0.8.1 wheel; PyTorch 2.11's
CUDA 13 wheels depend on the 0.8 series), except the two enums of ``cusparse.h`` (order, operation), whose values
have not changed since CUDA 10, and the data types of CUDA's ``library_types.h``.

The library is looked for where PyTorch loads it from (its wheels preload ``nvidia/cusparselt/lib/libcusparseLt.so.0``
from site-packages), then in torch's own lib folder, then where the dynamic loader finds it. ``KERNELKIT_CUSPARSELT``
(a path to the .so) comes first when set. Where the wheel's header sits beside the library, its struct sizes and
enum values are compared with the ones below before anything is called: a release that changed them is refused
with that reason, rather than called with a wrong layout (declarations the parser cannot find are let pass).

Nothing here runs at import; ``library()`` loads once and then returns the same object (or raises the same reason).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import site
import sys
from pathlib import Path

from kernelkit.errors import BackendUnavailable

HEADER_VERSION = (0, 8, 1)
ENV_PATH = "KERNELKIT_CUSPARSELT"
SONAME = "libcusparseLt.so.0"
WHEEL_DIR = Path("nvidia", "cusparselt")  # under site-packages: lib/ holds the .so, include/ the header

# Opaque structs: ``typedef struct { alignas(16) uint8_t data[512]; } <name>;`` for all five in 0.8.1 (1024 in 0.5
# and 0.6, 11024 in 0.2). Blobs get BLOB_BYTES, a margin over the header's size, at a 16-byte aligned address.
STRUCT_BYTES = {"cusparseLtHandle_t": 512, "cusparseLtMatDescriptor_t": 512, "cusparseLtMatmulDescriptor_t": 512,
                "cusparseLtMatmulAlgSelection_t": 512, "cusparseLtMatmulPlan_t": 512}
STRUCT_ALIGN = 16
BLOB_BYTES = 1024

# Enums: the enumerator's value (its position, or the "= n" the header writes).
CUSPARSELT_SPARSITY_50_PERCENT = 0  # cusparseLtSparsity_t
CUSPARSE_COMPUTE_32F = 2  # cusparseComputeType: 32I, 16F, 32F (what PyTorch passes for 16-bit inputs since 0.5.2)
CUSPARSELT_MATMUL_ALG_DEFAULT = 0  # cusparseLtMatmulAlg_t
CUSPARSELT_MATMUL_ALG_CONFIG_ID = 0  # cusparseLtMatmulAlgAttribute_t
CUSPARSE_ORDER_COL, CUSPARSE_ORDER_ROW = 1, 2  # cusparse.h, cusparseOrder_t
CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_TRANSPOSE = 0, 1  # cusparse.h, cusparseOperation_t
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14  # library_types.h, cudaDataType
LIBRARY_PROPERTIES = (0, 1, 2)  # library_types.h, libraryPropertyType: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
CUSPARSE_STATUS_ARCH_MISMATCH, CUSPARSE_STATUS_NOT_SUPPORTED = 4, 10  # cusparse.h: this GPU cannot run it

ENUMS = {"cusparseLtSparsity_t": {"CUSPARSELT_SPARSITY_50_PERCENT": CUSPARSELT_SPARSITY_50_PERCENT},
         "cusparseComputeType": {"CUSPARSE_COMPUTE_32F": CUSPARSE_COMPUTE_32F},
         "cusparseLtMatmulAlg_t": {"CUSPARSELT_MATMUL_ALG_DEFAULT": CUSPARSELT_MATMUL_ALG_DEFAULT},
         "cusparseLtMatmulAlgAttribute_t": {"CUSPARSELT_MATMUL_ALG_CONFIG_ID": CUSPARSELT_MATMUL_ALG_CONFIG_ID}}

_P, _I, _I64, _U32, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_uint32, ctypes.c_size_t
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
# Every function called, with its argument types as the header declares them (pointers to structs as void*;
# enums as int). Each returns cusparseStatus_t.
SIGNATURES: dict[str, list] = {
    "cusparseLtInit": [_P],
    "cusparseLtGetProperty": [_I, ctypes.POINTER(_I)],
    "cusparseLtDenseDescriptorInit": [_P, _P, _I64, _I64, _I64, _U32, _I, _I],
    "cusparseLtStructuredDescriptorInit": [_P, _P, _I64, _I64, _I64, _U32, _I, _I, _I],
    "cusparseLtMatDescriptorDestroy": [_P],
    "cusparseLtMatmulDescriptorInit": [_P, _P, _I, _I, _P, _P, _P, _P, _I],
    "cusparseLtMatmulAlgSelectionInit": [_P, _P, _P, _I],
    "cusparseLtMatmulAlgSelectionDestroy": [_P],
    "cusparseLtMatmulAlgGetAttribute": [_P, _P, _I, _P, _SIZE],
    "cusparseLtMatmulPlanInit": [_P, _P, _P, _P],
    "cusparseLtMatmulPlanDestroy": [_P],
    "cusparseLtMatmulGetWorkspace": [_P, _P, _SIZE_P],
    "cusparseLtMatmul": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, ctypes.c_int32],
    "cusparseLtMatmulSearch": [_P, _P, _P, _P, _P, _P, _P, _P, _P, _P, ctypes.c_int32],
    "cusparseLtSpMMACompressedSize2": [_P, _P, _SIZE_P, _SIZE_P],
    "cusparseLtSpMMACompress2": [_P, _P, _I, _I, _P, _P, _P, _P],
}


class CusparseLtError(RuntimeError):
    """A cuSPARSELt call returned a status other than CUSPARSE_STATUS_SUCCESS."""

    def __init__(self, function: str, status: int, text: str) -> None:
        super().__init__(f"{function} returned cuSPARSELt status {status} ({text})")
        self.function, self.status = function, status


class Blob:
    """One opaque cuSPARSELt struct: BLOB_BYTES of zeroed host memory; ``ptr`` is its 16-byte aligned address."""

    def __init__(self) -> None:
        self._raw = ctypes.create_string_buffer(BLOB_BYTES + STRUCT_ALIGN)
        base = ctypes.addressof(self._raw)
        self.ptr = base + (-base % STRUCT_ALIGN)


class Library:
    """The loaded libcusparseLt: ``call(name, *args)`` raises CusparseLtError on a failed status."""

    def __init__(self, cdll: ctypes.CDLL, path: str) -> None:
        self.path = path
        self.functions = {}
        for name, argtypes in SIGNATURES.items():
            fn = getattr(cdll, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            self.functions[name] = fn
        self._error_string = cdll.cusparseLtGetErrorString
        self._error_string.argtypes, self._error_string.restype = [ctypes.c_int], ctypes.c_char_p
        self.version = tuple(self._property(p) for p in LIBRARY_PROPERTIES)

    def _property(self, which: int) -> int:
        value = ctypes.c_int()
        self.call("cusparseLtGetProperty", which, ctypes.byref(value))
        return value.value

    def call(self, name: str, *args: object) -> None:
        status = self.functions[name](*args)
        if status:
            raise CusparseLtError(name, status, self.error_string(status))

    def error_string(self, status: int) -> str:
        text = self._error_string(status)
        return text.decode() if text else "no description"


def candidate_paths() -> list[Path]:
    """Where libcusparseLt.so.0 is looked for, in order (the loader's own search comes after these)."""
    found = [Path(os.environ[ENV_PATH])] if os.environ.get(ENV_PATH) else []
    found += loaded_paths()
    roots = [*sys.path, *site.getsitepackages(), site.getusersitepackages()]  # torch's preload walks sys.path
    found += [Path(root, WHEEL_DIR, "lib", SONAME) for root in dict.fromkeys(roots) if root]
    torch_spec = sys.modules.get("torch")
    if torch_spec is not None and getattr(torch_spec, "__file__", None):
        found.append(Path(torch_spec.__file__).parent / "lib" / SONAME)
    return found


def loaded_paths() -> list[Path]:
    """Copies of libcusparseLt this process has already mapped (torch's, once it ran a 2:4 op): the same copy is
    best, as two copies of one library would each keep their own state."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux
        return []
    return [Path(p) for p in dict.fromkeys(re.findall(r"(/\S*/libcusparseLt\.so[.\d]*)$", maps, re.MULTILINE))]


def header_problems(text: str) -> list[str]:
    """What a cusparseLt.h says differently from the sizes and enum values transcribed here ([] when none)."""
    problems = []
    for name, size in STRUCT_BYTES.items():
        match = re.search(r"uint8_t\s+data\[(\d+)\];\s*}\s*" + name + r"\s*;", text)
        if match is None:
            problems.append(f"{name}: not found")
        elif int(match.group(1)) != size:
            problems.append(f"{name}: {match.group(1)} bytes, not {size}")
    for name, expected in ENUMS.items():
        match = re.search(r"typedef\s+enum\s*{([^}]*)}\s*" + name + r"\s*;", text)
        if match is None:
            problems.append(f"{name}: not found")
            continue
        values, nxt = {}, 0
        try:
            for item in re.sub(r"//[^\n]*", "", match.group(1)).split(","):
                key, _, value = item.partition("=")
                if key.strip():
                    nxt = int(value.strip(), 0) if value.strip() else nxt
                    values[key.strip()] = nxt
                    nxt += 1
        except ValueError:  # a value written as an expression: not read here
            problems.append(f"{name}: unreadable")
            continue
        problems += [f"{key} = {values.get(key)}, not {value}" for key, value in expected.items()
                     if values.get(key) != value]
    return problems


@functools.cache
def library() -> Library:
    """The loaded library (once per process), or BackendUnavailable saying why it cannot be used."""
    tried = []
    for path in candidate_paths():
        if path.is_file():
            return _checked(_open(str(path)), path.parent.parent / "include" / "cusparseLt.h")
        tried.append(str(path.parent))
    for name in (ctypes.util.find_library("cusparseLt"), SONAME):
        if name:
            try:
                return _checked(_open(name), None)
            except BackendUnavailable:
                tried.append(name)
    raise BackendUnavailable(f"{SONAME} (cuSPARSELt, the nvidia-cusparselt wheel PyTorch depends on) was not "
                             f"found: looked in {', '.join(tried[:4])}{' and more' if len(tried) > 4 else ''}, "
                             f"the loader's path, and ${ENV_PATH}")


def _open(name: str) -> Library:
    try:
        return Library(ctypes.CDLL(name), name)
    except OSError as exc:
        raise BackendUnavailable(f"{name} could not be loaded: {exc}") from exc
    except AttributeError as exc:  # a function of the 0.8 API is missing: an older release
        raise BackendUnavailable(f"{name} lacks a function this binding calls ({exc})") from exc


def _checked(lib: Library, header: Path | None) -> Library:
    """lib, unless its version or the header beside it says its structs or enums differ from the ones above."""
    if lib.version[:2] < HEADER_VERSION[:2] or lib.version[0] != HEADER_VERSION[0]:
        raise BackendUnavailable(f"{lib.path} is cuSPARSELt {'.'.join(map(str, lib.version))}; this binding "
                                 f"follows the {'.'.join(map(str, HEADER_VERSION))} header (0.8 or a later 0.x)")
    if header is not None and header.is_file():
        # What this text parser cannot find or read is not held against the library; a difference is.
        problems = [p for p in header_problems(header.read_text(errors="replace"))
                    if not p.endswith(("not found", "unreadable"))]
        if problems:
            raise BackendUnavailable(f"{header} differs from the header this binding was written from: "
                                     + "; ".join(problems))
    return lib
