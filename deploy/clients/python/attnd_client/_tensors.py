"""Tensors on the client side: datatypes, the checks attnd makes on a tensor
(made here first, so that a bad tensor fails before it is sent, in attnd's
own words), and the two wire forms, JSON text and little-endian bytes.

Every tensor becomes a numpy array before anything else:

* float inputs (query, key, value, bias, w_q, w_k, w_v): float16, float32
  and float64 arrays keep their dtype; integer arrays, nested lists and
  Python or numpy numbers become float64 (their exact values);
* valid_lens: int64; mask: bool (true, false, 0 or 1).

Checks, in this order: the nesting of lists (ragged arrays, empty axes,
elements that are not numbers; a numpy array's empty axis too), then NaN
and infinities, then numbers that round to infinity in the datatype attnd
reads them as.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
from numpy.typing import NDArray

from ._errors import AttndInputError

#: a numpy array of any dtype
Array = NDArray[Any]

FLOAT, INT, BOOL = "float", "int", "bool"

#: v2 datatype -> the numpy dtype of its bytes on the wire (BF16: the top
#: 16 bits of a float32).
WIRE_DTYPES = {
    "FP32": "<f4", "FP64": "<f8", "FP16": "<f2", "BF16": "<u2",
    "INT8": "i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8",
    "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
    "BOOL": "?",
}
#: v2 datatype -> the dtype of the arrays the client returns; numpy has no
#: bfloat16, so BF16 values come back widened (exactly) to float32.
RESULT_DTYPES = {dt: np.dtype(t).newbyteorder("=") for dt, t in WIRE_DTYPES.items()}
RESULT_DTYPES["BF16"] = np.dtype(np.float32)
#: bytes per element of each datatype
ELEMENT_SIZE = {dt: np.dtype(t).itemsize for dt, t in WIRE_DTYPES.items()}
#: the datatypes attnd reads: floats for query, key, value, bias and the
#: additive weights; INT32 or INT64 for valid_lens; BOOL for mask.
INPUT_DATATYPES = ("FP32", "FP64", "FP16", "BF16", "INT32", "INT64", "BOOL")

# The first double that rounds to infinity in each type attnd rounds a
# number to, that number's decimal, and the largest finite value: attnd's
# range messages (proto/text/numscan.c).
_RANGE = {
    "float32": (340282356779733661637539395458142568448.0,
                "3.40282356779733661637539395458142568448e38", "3.4028235e38"),
    "FP16": (65520.0, "65520", "65504"),
    "BF16": (339617752923046005526922703901628039168.0,
             "3.39617752923046005526922703901628039168e38", "3.3895314e38"),
}
# The datatype of a float input -> the type attnd rounds its values to
# (FP64 is read as float32).
_ROUNDED_TO = {"FP32": "float32", "FP64": "float32", "FP16": "FP16", "BF16": "BF16",
               "float32": "float32"}


def kind_of(name: str) -> str:
    """attnd's element kind of an input: valid_lens and the cu_seqlens
    offsets hold integers, mask booleans, every other input floats."""
    if name in ("valid_lens", "cu_seqlens_q", "cu_seqlens_k"):
        return INT
    return BOOL if name == "mask" else FLOAT


def default_datatype(name: str, value: Any) -> str:
    """The v2 datatype a tensor is sent as unless the caller names one: a
    float16, float32 or float64 (or longer) numpy array's own; FP32 for any
    other float input (lists, numbers, integer arrays); INT64 for an int64
    numpy valid_lens and INT32 for other lengths; BOOL for mask."""
    kind = kind_of(name)
    dtype = value.dtype if isinstance(value, (np.ndarray, np.generic)) else None
    if kind == INT:
        return "INT64" if dtype == np.int64 else "INT32"
    if kind == BOOL:
        return "BOOL"
    if dtype is None or dtype.kind != "f":
        return "FP32"
    return {2: "FP16", 4: "FP32"}.get(dtype.itemsize, "FP64")


# ---- messages --------------------------------------------------------------

def index_text(shape: Sequence[int], flat_index: int) -> str:
    """The multi-index of element flat_index in row-major order, "[0][2][1]"."""
    if not shape:
        return ""
    return "".join("[%d]" % int(i) for i in np.unravel_index(flat_index, tuple(shape)))


def describe(v: Any) -> str:
    """A value as attnd names it in a message: true, null, a string, 2.5..."""
    if v is True or (isinstance(v, np.bool_) and bool(v)):
        return "true"
    if v is False or isinstance(v, np.bool_):
        return "false"
    if v is None:
        return "null"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim > 0):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, numbers.Real):
        return number_text(v)
    return "a " + type(v).__name__


def number_text(v: Any) -> str:
    """A number as this client writes it in JSON (json_numbers), which is
    how attnd echoes it: an integer as its digits, a float32 as its
    shortest digits, any other float as Python's repr ("5.0", "1e+39")."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, np.float32):
        return str(v)
    return repr(float(v))


def range_message(what: str, x: float, rounded_to: str) -> str:
    """attnd's message for a number that rounds to infinity, the number as
    this client writes it in JSON (Python's repr), which attnd echoes."""
    tie, text, largest = _RANGE[rounded_to]
    num = repr(float(x))
    if abs(x) == tie:
        return ("%s: %s is out of %s range (decimals from %s on round to infinity; "
                "the largest is %s)" % (what, num, rounded_to, text, largest))
    return "%s: %s is out of %s range (the largest is %s)" % (what, num, rounded_to, largest)


def nonfinite_json_message(what: str, x: float) -> str:
    """attnd's message for NaN, Infinity or -Infinity where JSON has a number."""
    word = "NaN" if math.isnan(x) else "Infinity" if x > 0 else "-Infinity"
    return "%s: %s is not a JSON number; attnd needs finite values" % (what, word)


def nonfinite_binary_message(what: str, datatype: str) -> str:
    """attnd's message for a non-finite element of a binary tensor."""
    if datatype == "FP64":
        return "%s: FP64 value is not finite or out of float32 range" % what
    return "%s: %s value is not finite (infinity or NaN)" % (what, datatype)


def _refuse(message: str) -> AttndInputError:
    return AttndInputError(message)


# ---- any tensor-like value -> a checked numpy array -------------------------

def _seq(v: Any) -> Optional[Sequence[Any]]:
    """v as a sequence when it is a list, tuple or numpy array of rank >= 1."""
    if isinstance(v, (list, tuple)):
        return v
    if isinstance(v, np.ndarray) and v.ndim > 0:
        rows: List[Any] = v.tolist()
        return rows
    return None


def _is_number(x: Any) -> bool:
    return (isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))) \
        or isinstance(x, (np.integer, np.floating))


class _Walk:
    """Nested lists -> a flat list and a shape, checked element by element in
    the order attnd reads them, with attnd's messages (proto/tensor/tensor.c)."""

    def __init__(self, name: str, kind: str) -> None:
        self.name = name
        self.kind = kind
        self.flat: List[Any] = []
        self.shape: List[int] = []
        self.idx: List[int] = []

    def at(self, d: int) -> str:
        return "".join("[%d]" % i for i in self.idx[:d])

    def ragged(self, d: int, got: Any) -> AttndInputError:
        seq = _seq(got)
        if seq is None:
            return _refuse("%s: ragged array at %s (expected an array of %d, got %s)"
                           % (self.name, self.at(d), self.shape[d], describe(got)))
        return _refuse("%s: ragged array at %s (length %d, expected %d)"
                       % (self.name, self.at(d), len(seq), self.shape[d]))

    def element(self, x: Any) -> Any:
        """One element, or the refusal attnd gives it."""
        at = self.at(len(self.shape))
        if self.kind == BOOL:
            if isinstance(x, (bool, np.bool_)):
                return bool(x)
            if _is_number(x) and float(x) in (0.0, 1.0):
                return float(x) == 1.0
            if _is_number(x) and not math.isfinite(float(x)):
                raise _refuse(nonfinite_json_message(self.name + at, float(x)))
            raise _refuse("%s: expected true, false, 0 or 1 at %s, got %s"
                          % (self.name, at, describe(x)))
        if not _is_number(x):
            raise _refuse("%s: expected %s at %s, got %s" % (
                self.name, "an integer" if self.kind == INT else "a number", at,
                describe(x)))
        return x

    def row(self, seq: Sequence[Any]) -> None:
        d = len(self.shape) - 1
        fast = (bool,) if self.kind == BOOL else (float, int)
        if all(type(x) in fast for x in seq):
            self.flat.extend(seq)
            return
        for i, x in enumerate(seq):
            self.idx[d] = i
            self.flat.append(self.element(x))

    def nested(self, node: Any, d: int) -> None:
        seq = _seq(node)
        if seq is None:
            raise self.ragged(d, node)
        n = self.shape[d]
        if d == len(self.shape) - 1:
            self.row(seq[:n])
        else:
            for i, child in enumerate(seq[:n]):
                self.idx[d] = i
                self.nested(child, d + 1)
        if len(seq) != n:
            raise self.ragged(d, seq)

    def run(self, value: Any) -> Tuple[List[Any], List[int]]:
        node = value
        while True:
            seq = _seq(node)
            if seq is None:
                break
            if len(seq) == 0:
                raise _refuse("%s: axis %d is empty" % (self.name, len(self.shape)))
            self.shape.append(len(seq))
            node = seq[0]
        self.idx = [0] * len(self.shape)
        if not self.shape:
            return [self.element(value)], []
        self.nested(value, 0)
        return self.flat, self.shape


def _first(mask: Array) -> int:
    return int(np.argmax(mask.reshape(-1)))


def _lengths(name: str, a: Array) -> Array:
    """Float or integer lengths -> int64, refusing NaN, infinities and
    fractions."""
    if a.dtype.kind == "f":
        fin = np.isfinite(a)
        if not fin.all():
            i = _first(~fin)
            raise _refuse(nonfinite_json_message(name + index_text(a.shape, i),
                                                 float(a.reshape(-1)[i])))
        frac = a != np.floor(a)
        if frac.any():
            i = _first(frac)
            raise _refuse("%s: expected an integer at %s, got %s" % (
                name, index_text(a.shape, i), describe(a.reshape(-1)[i])))
        a = np.clip(a, -2.0 ** 62, 2.0 ** 62)
    return a.astype(np.int64)


def _booleans(name: str, a: Array) -> Array:
    """0/1 numbers -> bool, refusing anything else."""
    if a.dtype.kind == "f":
        fin = np.isfinite(a)
        if not fin.all():
            i = _first(~fin)
            raise _refuse(nonfinite_json_message(name + index_text(a.shape, i),
                                                 float(a.reshape(-1)[i])))
    bad = (a != 0) & (a != 1)
    if bad.any():
        i = _first(bad)
        raise _refuse("%s: expected true, false, 0 or 1 at %s, got %s" % (
            name, index_text(a.shape, i), describe(a.reshape(-1)[i])))
    return a.astype(bool)


def to_array(name: str, value: Any, kind: Optional[str] = None) -> Array:
    """Any tensor-like value -> a numpy array of its kind (see the module's
    docstring), refusing what attnd would refuse in its structure and
    element types.  Floats are checked for NaN and range later, by
    check_floats, once the wire form is known."""
    kind = kind or kind_of(name)
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        if 0 in a.shape:  # as attnd (and _Walk, for lists) refuses it
            raise _refuse("%s: axis %d is empty" % (name, a.shape.index(0)))
        if not a.dtype.isnative:
            a = a.astype(a.dtype.newbyteorder("="))
        k = a.dtype.kind
        if kind == FLOAT:
            if k == "f":
                return a.astype(np.float64) if a.dtype.itemsize > 8 else a
            if k in "iu":
                return a.astype(np.float64)
            if k == "b":
                raise _refuse("%s: expected a number at %s, got %s" % (
                    name, index_text(a.shape, 0), describe(a.reshape(-1)[0])))
        elif kind == INT:
            if k in "iuf":
                return _lengths(name, a)
            if k == "b":
                raise _refuse("%s: expected an integer at %s, got %s" % (
                    name, index_text(a.shape, 0), describe(a.reshape(-1)[0])))
        else:
            if k == "b":
                return a
            if k in "iuf":
                return _booleans(name, a)
        value = a.tolist()
    flat, shape = _Walk(name, kind).run(value)
    if kind == BOOL:
        return np.array(flat, dtype=bool).reshape(shape)
    a = np.array([float(x) for x in flat] if kind == INT else flat,
                 dtype=np.float64).reshape(shape)
    return _lengths(name, a) if kind == INT else a


def check_floats(name: str, a: Array, datatype: str, binary: bool) -> None:
    """Refuses NaN, infinities and numbers that round to infinity in the
    type attnd reads a float tensor as.  datatype: the v2 datatype it is
    sent as, or "float32" for /v1; binary: sent as bytes (the messages of
    attnd's binary reader) or as JSON numbers."""
    if a.size == 0:
        return
    fin = np.isfinite(a)
    if not fin.all():
        i = _first(~fin)
        what = name + index_text(a.shape, i)
        if binary:
            raise _refuse(nonfinite_binary_message(what, datatype))
        raise _refuse(nonfinite_json_message(what, float(a.reshape(-1)[i])))
    rounded_to = _ROUNDED_TO[datatype]
    tie = _RANGE[rounded_to][0]
    if float(np.finfo(a.dtype).max) < tie:
        return
    if binary or rounded_to != "float32":
        # what the encoder (or attnd, for FP64) rounds the values to, and
        # FP16 and BF16 JSON numbers carry (json_numbers); BF16 goes
        # through float32
        with np.errstate(over="ignore"):
            c = np.abs(a.astype(np.float16 if datatype == "FP16" else np.float32))
        over = ~np.isfinite(c)
        if datatype == "BF16":
            over |= c >= np.float32(tie)
    else:
        # JSON: the client sends float32(x) (json_numbers), infinite from
        # the tie on
        over = np.abs(a) >= tie
    if over.any():
        i = _first(over)
        what = name + index_text(a.shape, i)
        if binary and datatype == "FP64":
            raise _refuse(nonfinite_binary_message(what, datatype))
        raise _refuse(range_message(what, float(a.reshape(-1)[i]), rounded_to))


# ---- wire forms ----------------------------------------------------------------

def _bf16_bits(a: Array) -> Array:
    """BF16 bits of float32(a), rounded to nearest, ties to even (as torch
    and ml_dtypes round finite numbers); NaN stays a quiet NaN."""
    with np.errstate(over="ignore"):
        bits = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    nan = ((bits >> 23) & 0xFF) == 0xFF
    nan &= (bits & 0x7FFFFF) != 0
    rounded = np.where(nan, (bits >> 16) | 0x40, rounded)
    return rounded.astype("<u2")


def wire_bytes(a: Array, datatype: str) -> memoryview:
    """The little-endian bytes of a as datatype (Triton's binary tensor
    form), as a flat byte view: of a itself where it holds them already (a
    C-contiguous array of the datatype's little-endian type: no copy), else
    of a converted copy.  FP32, FP16 and BF16 round to nearest, ties to
    even; BF16 rounds to float32 first.  a should have passed to_array and
    check_floats.  The view reads a while it lives: send it before a
    changes."""
    if datatype == "BF16":
        arr = _bf16_bits(a)
    else:
        if datatype not in WIRE_DTYPES:
            raise ValueError("datatype %r is not one of %s"
                             % (datatype, ", ".join(WIRE_DTYPES)))
        if datatype == "INT32" and a.size and a.dtype.kind in "iu" and (
                a.max() > 2 ** 31 - 1 or a.min() < -2 ** 31):
            raise ValueError("a value does not fit INT32 (send INT64)")
        with np.errstate(over="ignore"):
            arr = np.ascontiguousarray(a, dtype=WIRE_DTYPES[datatype])
    return memoryview(arr.reshape(-1).view(np.uint8))


def encode(a: Array, datatype: str) -> bytes:
    """wire_bytes(a, datatype) as bytes of their own."""
    return wire_bytes(a, datatype).tobytes()


def decode(data: Any, datatype: str, shape: Sequence[int],
           in_place: bool = False) -> Array:
    """A binary tensor (bytes, or a buffer) -> a new, writable numpy array of
    the datatype's result dtype (BF16 -> float32).  in_place: where data is
    a writable buffer nothing else uses, aligned for the dtype and already
    of it, the array is data itself (no copy); else a copy."""
    if datatype not in WIRE_DTYPES:
        raise ValueError("datatype %r is not one of %s" % (datatype, ", ".join(WIRE_DTYPES)))
    if len(data) != ELEMENT_SIZE[datatype] * int(np.prod(shape, dtype=np.int64)):
        raise ValueError("%d bytes do not hold a %s tensor of shape %s"
                         % (len(data), datatype, list(shape)))
    if datatype == "BF16":
        high = np.frombuffer(data, "<u2").astype(np.uint32) << 16
        return high.view(np.float32).reshape(shape)
    a = np.frombuffer(data, WIRE_DTYPES[datatype])
    if not (in_place and a.flags.writeable and a.flags.aligned and
            a.dtype == RESULT_DTYPES[datatype]):
        a = a.astype(RESULT_DTYPES[datatype])
    return a.reshape(shape)


def from_json(data: Any, datatype: str, shape: Sequence[int]) -> Array:
    """A JSON tensor's data (flat or nested) -> a numpy array of the
    datatype's result dtype.  A float null (how JSON carries the lse's
    -inf) becomes -inf."""
    dtype = RESULT_DTYPES.get(datatype, np.float32)
    if dtype.kind == "f":
        data = null_to_ninf(data)
    return np.asarray(data, dtype=dtype).reshape(shape)


def null_to_ninf(data: Any) -> Any:
    """Nested lists with every None replaced by -inf: JSON has no
    infinity, and attnd writes the lse of a row with nothing allowed and
    no sink as null."""
    if data is None:
        return -math.inf
    if isinstance(data, list):
        return [null_to_ninf(x) for x in data]
    return data


def json_numbers(a: Array, datatype: str) -> str:
    """The elements of a, row-major, as comma-separated JSON text that attnd
    reads back as the values binary tensors carry: each float rounded as
    encode() rounds it (FP16 and BF16 to their grid, everything else to
    float32: ties to even) and sent as that value's shortest digits, which
    attnd's decimal reader takes back exactly.  A double's own digits would
    be rounded once more by attnd, from the decimal, and can land on the
    other side of a tie.  a has passed check_floats."""
    flat = a.reshape(-1)
    if a.dtype == np.bool_:
        return ",".join("true" if x else "false" for x in flat.tolist())
    if a.dtype.kind in "iu":
        return ",".join(map(str, flat.tolist()))
    if datatype == "FP16":
        with np.errstate(over="ignore"):
            flat = flat.astype(np.float16)
    elif datatype == "BF16":
        flat = (_bf16_bits(flat).astype(np.uint32) << 16).view(np.float32)
    return ",".join(flat.astype(np.float32).astype(str).tolist())


def json_tensor(a: Array, datatype: str) -> str:
    """{"shape": [...], "data": [...]}, attnd's flat tensor form."""
    return '{"shape":[%s],"data":[%s]}' % (",".join(map(str, a.shape)),
                                           json_numbers(a, datatype))


def encode_tensor(value: Any, datatype: str, name: str = "tensor") -> bytes:
    """Any tensor-like value as the little-endian bytes of datatype, after
    the checks infer makes on a binary input (AttndInputError): what infer
    sends, and what SharedMemoryRegion.put writes.  The element kind comes
    from the datatype (BOOL, INT*/UINT*, else floats)."""
    kind = BOOL if datatype == "BOOL" else INT if "INT" in datatype else FLOAT
    a = to_array(name, value, kind)
    if kind == FLOAT and datatype in _ROUNDED_TO:
        check_floats(name, a, datatype, binary=True)
    return encode(a, datatype)
