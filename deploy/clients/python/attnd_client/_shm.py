"""Tensors in system shared memory (Triton's system shared memory extension).

A region is a POSIX shared memory object (shm_open) that the client creates
and fills, then registers with attnd under a name
(AttndClient.register_system_shared_memory).  An inference request then
names the region, a byte offset in it and a byte count for an input
instead of carrying the data, and for an output attnd writes into the
region instead of the answer.  attnd must run on the same host, started
with --allow-client-shm 1.

    region = SharedMemoryRegion("io", 1 << 20)
    client.register_system_shared_memory(region.name, region.key, region.byte_size)
    q = region.put("query", query, offset=0)
    k = region.put("key", key, offset=q.end_aligned())
    ...
    out = region.output(offset=..., byte_size=...)
    res = client.infer("attention", {"query": q, "key": k, "value": v},
                       outputs={"output": out})
    res["output"]            # a numpy array read back from the region

ShmTensor marks a tensor's place; SharedMemoryRegion creates, fills and
reads a region with multiprocessing.shared_memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from multiprocessing import shared_memory
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _tensors
from ._tensors import Array

#: offsets SharedMemoryRegion.from_arrays aligns each tensor to
ALIGN = 64


@dataclass(frozen=True)
class ShmTensor:
    """A tensor's place in a registered system shared memory region.

    As an infer input it needs shape and datatype (attnd reads byte_size
    bytes at offset); as an output, only region, byte_size (room for the
    result) and offset.  memory, when set, is the SharedMemoryRegion the
    client reads an output back from.

    Attributes:
        region: the name the region was registered under.
        byte_size: bytes of the tensor (input) or room for it (output).
        offset: bytes from the start of the registered region.
        shape: the tensor's shape (inputs; filled in on returned outputs).
        datatype: its v2 datatype, "FP32" etc. (as shape).
        memory: the region's mapping in this process, if the client has it.
    """

    region: str
    byte_size: int
    offset: int = 0
    shape: Optional[Tuple[int, ...]] = None
    datatype: Optional[str] = None
    memory: Optional["SharedMemoryRegion"] = field(default=None, repr=False, compare=False)

    @property
    def end(self) -> int:
        """The offset just past this tensor's bytes."""
        return self.offset + self.byte_size

    def end_aligned(self, align: int = ALIGN) -> int:
        """end, rounded up to a multiple of align: where to put the next tensor."""
        return -(-self.end // align) * align

    def parameters(self) -> Dict[str, Any]:
        """The v2 tensor parameters that place it."""
        p: Dict[str, Any] = {"shared_memory_region": self.region,
                             "shared_memory_byte_size": int(self.byte_size)}
        if self.offset:
            p["shared_memory_offset"] = int(self.offset)
        return p

    def read(self) -> Array:
        """The tensor's values, read from memory (a copy)."""
        if self.memory is None or self.shape is None or self.datatype is None:
            raise ValueError("ShmTensor.read needs memory, shape and datatype")
        return self.memory.read(self.shape, self.datatype, self.offset)


class SharedMemoryRegion:
    """A POSIX shared memory object this process creates, to register with
    attnd as `name`.

    Args:
        name: the name to register it under (AttndClient's
            register_system_shared_memory(region.name, region.key,
            region.byte_size)); tensors refer to the region by it.
        byte_size: the object's size in bytes.
        key: the object's shm_open name, "/attnd_io"; default: a fresh one.
            An object with that key must not exist yet.

    Attributes: name, key (with its leading "/", as attnd's register wants
    it), byte_size, buf (a memoryview of the whole object).

    Use it as a context manager, or call close() and unlink(): the object
    outlives attnd's registration, and removing it is the creator's job.
    """

    def __init__(self, name: str, byte_size: int, *, key: Optional[str] = None) -> None:
        if byte_size <= 0:
            raise ValueError("byte_size must be positive")
        self.name = name
        self._shm = shared_memory.SharedMemory(
            name=key.lstrip("/") if key else None, create=True, size=byte_size)
        self.byte_size = byte_size
        self.key = "/" + self._shm.name
        self._unlinked = False

    @property
    def buf(self) -> memoryview:
        """The object's bytes."""
        buf = self._shm.buf
        assert buf is not None, "the region is closed"
        return buf[:self.byte_size]

    @classmethod
    def from_arrays(cls, name: str, arrays: Mapping[str, Any], *,
                    datatypes: Optional[Mapping[str, str]] = None,
                    key: Optional[str] = None,
                    room: int = 0) -> Tuple["SharedMemoryRegion", Dict[str, ShmTensor]]:
        """A region that holds the given inputs one after another (each at a
        multiple of 64 bytes), then `room` more bytes (for outputs, from
        ShmTensor.end_aligned() of the last input).  Returns the region and
        {input name: ShmTensor} to pass to infer."""
        datatypes = dict(datatypes or {})
        prepared = {}
        offset = 0
        for n, value in arrays.items():
            a, dt = _prepared(n, value, datatypes.get(n))
            size = a.size * _tensors.ELEMENT_SIZE[dt]
            prepared[n] = (a, dt, offset)
            offset = -(-(offset + size) // ALIGN) * ALIGN
        region = cls(name, max(offset + room, 1), key=key)
        try:
            placed = {n: region._write(a, dt, off) for n, (a, dt, off) in prepared.items()}
        except BaseException:
            region.close()
            region.unlink()
            raise
        return region, placed

    def put(self, input_name: str, value: Any, offset: int = 0,
            datatype: Optional[str] = None) -> ShmTensor:
        """Writes an infer input (attnd's input name: query, key, value,
        valid_lens, mask, bias, w_q, w_k, w_v) at offset, as datatype (by
        default as infer would send it), after the checks infer makes.
        Returns its ShmTensor."""
        a, dt = _prepared(input_name, value, datatype)
        return self._write(a, dt, offset)

    def _write(self, a: Array, datatype: str, offset: int) -> ShmTensor:
        data = _tensors.encode(a, datatype)
        if offset < 0 or offset + len(data) > self.byte_size:
            raise ValueError("%d bytes at offset %d do not fit region %r of %d bytes"
                             % (len(data), offset, self.name, self.byte_size))
        self.buf[offset:offset + len(data)] = data
        return ShmTensor(self.name, len(data), offset, tuple(a.shape), datatype, self)

    def output(self, byte_size: Optional[int] = None, offset: int = 0) -> ShmTensor:
        """A place for an infer output: byte_size bytes at offset (default:
        the rest of the region).  infer returns the output as an array read
        from here."""
        if byte_size is None:
            byte_size = self.byte_size - offset
        if offset < 0 or byte_size < 0 or offset + byte_size > self.byte_size:
            raise ValueError("%d bytes at offset %d do not fit region %r of %d bytes"
                             % (byte_size, offset, self.name, self.byte_size))
        return ShmTensor(self.name, byte_size, offset, memory=self)

    def read(self, shape: Sequence[int], datatype: str, offset: int = 0) -> Array:
        """A tensor of shape and datatype at offset, as a new numpy array
        (BF16 widened to float32)."""
        size = int(np.prod(shape, dtype=np.int64)) * _tensors.ELEMENT_SIZE[datatype]
        if offset < 0 or offset + size > self.byte_size:
            raise ValueError("%d bytes at offset %d do not fit region %r of %d bytes"
                             % (size, offset, self.name, self.byte_size))
        return _tensors.decode(bytes(self.buf[offset:offset + size]), datatype, shape)

    def close(self) -> None:
        """Unmaps the object from this process (it still exists).
        BufferError while a view of buf (np.frombuffer(region.buf)) is
        alive: the mapping stays for that view."""
        self._shm.close()

    def unlink(self) -> None:
        """Removes the object, once (attnd's mapping, if registered, stays
        valid until it unregisters the region)."""
        if not self._unlinked:
            self._shm.unlink()
            self._unlinked = True

    def __enter__(self) -> "SharedMemoryRegion":
        return self

    def __exit__(self, *exc: Any) -> None:
        # removed first: a close() refused for a live view (BufferError)
        # must not leave the object behind
        try:
            self.unlink()
        finally:
            self.close()

    def __repr__(self) -> str:
        return "SharedMemoryRegion(name=%r, key=%r, byte_size=%d)" % (
            self.name, self.key, self.byte_size)


def _prepared(name: str, value: Any, datatype: Optional[str]) -> Tuple[Array, str]:
    """An input as infer checks and types it for binary sending."""
    a = _tensors.to_array(name, value)
    dt = datatype or _tensors.default_datatype(name, value)
    if dt not in _tensors.WIRE_DTYPES:
        raise ValueError("%s: datatype %r is not one of %s"
                         % (name, dt, ", ".join(_tensors.WIRE_DTYPES)))
    if _tensors.kind_of(name) == _tensors.FLOAT and dt in ("FP32", "FP64", "FP16", "BF16"):
        _tensors.check_floats(name, a, dt, binary=True)
    return a, dt


def filled(t: ShmTensor, shape: Sequence[int], datatype: str) -> ShmTensor:
    """t with the shape and datatype attnd reported for it."""
    return replace(t, shape=tuple(shape), datatype=datatype)
