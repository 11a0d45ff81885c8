"""attnd_client: a Python client for attnd, masked scaled-dot-product
attention over HTTP (its /v1 JSON API, and KServe v2 with Triton's binary
tensor and system shared memory extensions).

    import numpy as np
    from attnd_client import AttndClient

    with AttndClient("http://127.0.0.1:8000") as c:     # token="..." for --token
        q = np.random.rand(1, 4, 8).astype(np.float32)
        k = np.random.rand(1, 6, 8).astype(np.float32)
        v = np.random.rand(1, 6, 2).astype(np.float32)
        r = c.attention(q, k, v, valid_lens=[5], causal=True)
        r["output"], r["weights"]                       # float32 arrays
        out = c.infer("attention", {"query": q, "key": k, "value": v},
                      outputs=["output"], datatypes={"query": "BF16"})
        out["output"]

AsyncAttndClient has the same methods as coroutines, for asyncio
applications.  Calls that meet a 503 or a connection failing before the
answer are sent again, DEFAULT_RETRIES times unless retries= says otherwise.

Tensors may be numpy arrays (float16, float32, float64, integers), numpy
scalars, nested lists or Python numbers; answers are numpy arrays in their
own dtypes.  Errors are AttndError (status, message), with the subclasses
AttndConnectionError (no answer) and AttndInputError (a tensor refused
before sending, worded as attnd words it).
"""

from ._async import AsyncAttndClient
from ._base import DEFAULT_RETRIES
from ._client import AttentionResult, AttndClient, TensorLike
from ._errors import AttndConnectionError, AttndError, AttndInputError
from ._shm import ShmTensor, SharedMemoryRegion
from ._tensors import INPUT_DATATYPES, decode as decode_tensor, encode_tensor

__version__ = "0.1.0"

__all__ = [
    "AttndClient", "AsyncAttndClient", "AttentionResult", "TensorLike", "DEFAULT_RETRIES",
    "AttndError", "AttndConnectionError", "AttndInputError",
    "ShmTensor", "SharedMemoryRegion",
    "encode_tensor", "decode_tensor", "INPUT_DATATYPES",
]
