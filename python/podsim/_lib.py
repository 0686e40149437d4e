"""_lib.py: libpodsim loaded through ctypes, and its strings-in, strings-out
API (sim/run/api.h) as Python functions.

The library is found, first to last: $PODSIM_LIB (a path to libpodsim.so),
build/libpodsim.so of the source tree this package sits in (python/ beside
build/), then the system's (ldconfig: an installed libpodsim).  The library
itself finds experiments, topologies and models as the podsim command line
does: $PODSIM_DATA_DIR, else the tree it was built or installed in.

Invariant: every result the library hands back is freed here, once, and
every failure becomes an exception carrying the message `podsim` prints
after "podsim: " and the exit status it would exit with.
"""

import ctypes
import ctypes.util
import os
import threading

# PsInputError's codes (sim/common/common.h), by name
INPUT_CODES = {0: "file", 1: "syntax", 2: "type", 3: "key", 4: "value", 5: "does_not_fit"}


class PodsimError(Exception):
    """A run, sweep or describe that failed: .message is what `podsim`
    prints after "podsim: ", .status the exit status it exits with."""

    def __init__(self, message, status):
        super().__init__(message)
        self.message = message
        self.status = status


class InputError(PodsimError, ValueError):
    """Bad input (exit status 2): an unknown key, a bad value, a missing
    file, a batch that does not fit.  .code names the kind ("key", "value",
    "file", "syntax", "type", "does_not_fit")."""

    def __init__(self, message, code):
        super().__init__(message, 2)
        self.code = code


class InternalError(PodsimError, RuntimeError):
    """A failure of podsim itself (exit status 1)."""

    def __init__(self, message):
        super().__init__(message, 1)


class _GError(ctypes.Structure):
    _fields_ = [("domain", ctypes.c_uint32), ("code", ctypes.c_int), ("message", ctypes.c_char_p)]


_GErrorP = ctypes.POINTER(_GError)
_lock = threading.Lock()
_lib = None


def library_path():
    """The libpodsim this package loads (or would load)."""
    env = os.environ.get("PODSIM_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libpodsim.so")
    if os.path.exists(tree):
        return tree
    return ctypes.util.find_library("podsim") or tree


def _declare(lib):
    strings = ctypes.POINTER(ctypes.c_char_p)
    err = ctypes.POINTER(_GErrorP)
    lib.ps_api_version.restype = ctypes.c_char_p
    lib.ps_api_version.argtypes = []
    # c_void_p, not c_char_p: the pointer must reach ps_api_free
    lib.ps_api_run_json.restype = ctypes.c_void_p
    lib.ps_api_run_json.argtypes = [ctypes.c_char_p, strings, ctypes.c_int, err]
    lib.ps_api_describe.restype = ctypes.c_void_p
    lib.ps_api_describe.argtypes = [ctypes.c_char_p, ctypes.c_char_p, strings, ctypes.c_int, err]
    for name in ("ps_api_error_status", "ps_api_error_code"):
        getattr(lib, name).restype = ctypes.c_int
        getattr(lib, name).argtypes = [_GErrorP]
    lib.ps_api_error_message.restype = ctypes.c_char_p
    lib.ps_api_error_message.argtypes = [_GErrorP]
    lib.ps_api_error_free.restype = None
    lib.ps_api_error_free.argtypes = [_GErrorP]
    lib.ps_api_free.restype = None
    lib.ps_api_free.argtypes = [ctypes.c_void_p]


def lib():
    """The loaded library (loaded on first use)."""
    global _lib
    with _lock:
        if _lib is None:
            path = library_path()
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                raise InternalError(
                    f"cannot load libpodsim ({path}): {e}; build it with `make` in the "
                    "repository, or set PODSIM_LIB to the path of libpodsim.so") from None
            _declare(handle)
            _lib = handle
    return _lib


def _raise(error):
    """Turns a GError the library set into the matching exception (and frees it)."""
    l = lib()
    message = l.ps_api_error_message(error).decode("utf-8", "replace")
    status = l.ps_api_error_status(error)
    code = l.ps_api_error_code(error)
    l.ps_api_error_free(error)
    if status == 2:
        raise InputError(message, INPUT_CODES.get(code, str(code)))
    raise InternalError(message)


def _call(fn, *args):
    """Calls an API function taking (..., sets, n, GError **) last and
    returning text; the text, or an exception."""
    *head, sets = args
    encoded = [s.encode("utf-8") for s in sets]
    array = (ctypes.c_char_p * (len(encoded) + 1))(*encoded, None)
    error = _GErrorP()
    ptr = fn(*head, array, len(encoded), ctypes.byref(error))
    if not ptr:
        if not error:
            raise InternalError("internal error: a step failed without an error message")
        _raise(error)
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        lib().ps_api_free(ptr)


def run_json(experiment, sets):
    """ps_api_run_json: the summary's JSON text."""
    return _call(lib().ps_api_run_json, experiment.encode("utf-8"), sets)


def describe_text(kind, name, sets):
    """ps_api_describe: JSON text (experiment, topology) or a table (model)."""
    return _call(lib().ps_api_describe, kind.encode("utf-8"), name.encode("utf-8"), sets)


def version():
    """The library's version ("0.1.0")."""
    return lib().ps_api_version().decode()
