"""A float64 reference of attnd's attention contract (design.md), in plain
Python so that it runs anywhere python3 does.  Deliberately the slow, obvious
loops: it is the yardstick, not a second implementation to optimise.

Tensors are nested lists.  attention() takes the same fields as a
POST /v1/attention body and returns (output, weights) as nested lists of
floats with the query's rank; lse() the rows' log-sum-exp, (B, [H,] Lq),
-inf for a row with nothing allowed and no sink.

The attention variants follow core/attn.h: sinks (H,), softcap,
alibi_slopes (H,) or (B, H), packed sequences (cu_seqlens_q/_k, with i,
j, Lq, Lk counted within the query's own sequence for causal, the window
and ALiBi) and window_align.
"""

import math
import random

M64 = (1 << 64) - 1


def shape_of(t):
    s = []
    while isinstance(t, list):
        s.append(len(t))
        t = t[0]
    return s


def flatten(t):
    if not isinstance(t, list):
        return [t]
    out = []
    for x in t:
        out.extend(flatten(x))
    return out


def nest(flat, shape):
    if len(shape) == 1:
        return list(flat[:shape[0]])
    step = len(flat) // shape[0]
    return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def rand_tensor(rng, shape, scale=1.0):
    if len(shape) == 1:
        return [rng.gauss(0.0, 1.0) * scale for _ in range(shape[0])]
    return [rand_tensor(rng, shape[1:], scale) for _ in range(shape[0])]


def f32(x):
    """Rounds a Python float to the nearest float32, as attnd's decoder does."""
    import struct
    return struct.unpack("f", struct.pack("f", x))[0]


def mix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def dropout_keep(seed, n, p):
    u = (mix(seed ^ mix(n)) >> 40) * 2.0 ** -24
    return u >= f32(p)


def _bcast_get(t, shp, idx):
    """Reads t (shape shp) at the trailing-axis broadcast of index idx."""
    off = len(idx) - len(shp)
    v = t
    for a, n in enumerate(shp):
        i = idx[off + a]
        v = v[0 if n == 1 else i]
    return v


def _as4(t, rank):
    return t if rank == 4 else [[x] for x in t]


def attention(req):
    """Returns (output, weights) for a /v1/attention request dict."""
    out, wts, _ = _attention(req)
    return out, wts


def lse(req):
    """The row log-sum-exp of a request, (B, [H,] Lq), float('-inf') for a
    row with nothing allowed and no sink."""
    return _attention(req, with_lse=True)[3]


def _seq_of(cu_q, cu_k, Lq, Lk, i):
    """(query offset, key offset, Lq, Lk) of query i's packed sequence."""
    if cu_q is None:
        return 0, 0, Lq, Lk
    for n in range(len(cu_q) - 1):
        if cu_q[n] <= i < cu_q[n + 1]:
            return cu_q[n], cu_k[n], cu_q[n + 1] - cu_q[n], cu_k[n + 1] - cu_k[n]
    raise ValueError("query %d in no sequence" % i)


def _attention(req, with_lse=False):
    """(output, weights, allowed key count per row[, lse]) of a request."""
    q, k, v = req["query"], req["key"], req["value"]
    rank = len(shape_of(q))
    Q, K, V = _as4(q, rank), _as4(k, rank), _as4(v, rank)
    B, H, Lq, D = shape_of(Q)
    _, Hkv, Lk, Dk = shape_of(K)
    Dv = shape_of(V)[3]
    additive = req.get("scoring") == "additive"
    scale = req.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    causal = req.get("causal") or False
    if causal is True:
        causal = "upper_left"
    vl = req.get("valid_lens")
    mask, bias, window = req.get("mask"), req.get("bias"), req.get("window")
    target = [B, H, Lq, Lk] if rank == 4 else [B, Lq, Lk]
    mshape = shape_of(mask) if mask is not None else None
    bshape = shape_of(bias) if bias is not None else None
    drop = req.get("dropout") or {}
    p = drop.get("p", 0.0)
    seed = drop.get("seed", 0)
    sinks, softcap = req.get("sinks"), req.get("softcap")
    slopes = req.get("alibi_slopes")
    cu_q, cu_k = req.get("cu_seqlens_q"), req.get("cu_seqlens_k")
    lower_right = req.get("window_align") == "lower_right"

    def slope(b, h):
        return slopes[b][h] if isinstance(slopes[0], list) else slopes[h]

    def allowed(b, h, i, j):
        qo, ko, lq, lk = _seq_of(cu_q, cu_k, Lq, Lk, i)
        il, jl = i - qo, j - ko
        if not 0 <= jl < lk:
            return False
        if vl is not None:
            lim = vl[b][i] if isinstance(vl[b], list) else vl[b]
            if j >= lim:
                return False
        if causal == "upper_left" and jl > il:
            return False
        if causal == "lower_right" and jl > il + lk - lq:
            return False
        if window is not None:
            left, right = window
            c = il + lk - lq if lower_right else il
            if left is not None and jl < c - left:
                return False
            if right is not None and jl > c + right:
                return False
        if mask is not None:
            idx = [b, h, i, j] if rank == 4 else [b, i, j]
            if not _bcast_get(mask, mshape, idx):
                return False
        return True

    out = [[[[0.0] * Dv for _ in range(Lq)] for _ in range(H)] for _ in range(B)]
    wts = [[[[0.0] * Lk for _ in range(Lq)] for _ in range(H)] for _ in range(B)]
    counts = [[[0] * Lq for _ in range(H)] for _ in range(B)]
    lses = [[[float("-inf")] * Lq for _ in range(H)] for _ in range(B)]
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)
            for i in range(Lq):
                s = {}
                for j in range(Lk):
                    if not allowed(b, h, i, j):
                        continue
                    if additive:
                        wq, wk, wv = req["w_q"], req["w_k"], req["w_v"]
                        x = 0.0
                        for c in range(len(wv)):
                            pq = sum(wq[c][d] * Q[b][h][i][d] for d in range(D))
                            pk = sum(wk[c][d] * K[b][g][j][d] for d in range(Dk))
                            x += wv[c] * math.tanh(pq + pk)
                    else:
                        x = sum(Q[b][h][i][d] * K[b][g][j][d] for d in range(D)) * scale
                    if softcap is not None:
                        x = softcap * math.tanh(x / softcap)
                    if bias is not None:
                        idx = [b, h, i, j] if rank == 4 else [b, i, j]
                        x += _bcast_get(bias, bshape, idx)
                    if slopes is not None:
                        qo, ko, lq, lk = _seq_of(cu_q, cu_k, Lq, Lk, i)
                        x -= slope(b, h) * abs((i - qo) + lk - lq - (j - ko))
                    s[j] = x
                counts[b][h][i] = len(s)
                sink = sinks[h] if sinks is not None else None
                if sink is not None:
                    lses[b][h][i] = sink
                if not s:
                    continue
                m = max(s.values())
                if sink is not None:
                    m = max(m, sink)
                e = {j: math.exp(x - m) for j, x in s.items()}
                z = sum(e.values()) + (math.exp(sink - m) if sink is not None else 0.0)
                lses[b][h][i] = m + math.log(z)
                for j, x in e.items():
                    wts[b][h][i][j] = x / z
                for j in s:
                    w = wts[b][h][i][j]
                    if p > 0:
                        n = ((b * H + h) * Lq + i) * Lk + j
                        w = w / (1.0 - p) if dropout_keep(seed, n, p) else 0.0
                    for c in range(Dv):
                        out[b][h][i][c] += w * V[b][g][j][c]
    if rank == 3:
        out = [o[0] for o in out]
        wts = [w[0] for w in wts]
        counts = [c[0] for c in counts]
        lses = [x[0] for x in lses]
    if with_lse:
        return out, wts, counts, lses
    return out, wts, counts


def row_diagnostics(a, allowed):
    """The four per-row figures of one row of weights a (float64 sums):
    entropy in nats, largest weight and the Frobenius norm of the softmax
    Jacobian diag(a) - a a^T, summed entry by entry (not by the closed
    form, so that the two are checked against each other).  A row with no
    allowed key is 0 everywhere."""
    if allowed == 0:
        return {"allowed_keys": 0, "entropy": 0.0, "max_weight": 0.0, "jacobian_norm": 0.0}
    n = len(a)
    fro2 = 0.0
    for i in range(n):
        for j in range(n):
            x = (a[i] if i == j else 0.0) - a[i] * a[j]
            fro2 += x * x
    return {"allowed_keys": allowed,
            "entropy": -sum(x * math.log(x) for x in a if x > 0.0),
            "max_weight": max(a),
            "jacobian_norm": math.sqrt(fro2)}


DIAGNOSTICS = ("allowed_keys", "entropy", "max_weight", "jacobian_norm")


def diagnostics(req):
    """The per-row diagnostics of a request (design.md), each a nested list
    shaped like the output without its last axis, (B, [H,] Lq), computed
    from the float64 reference weights."""
    _, wts, counts = _attention(req)
    rows = flatten(counts)
    Lk = shape_of(wts)[-1]
    flat_w = flatten(wts)
    shape = shape_of(counts)
    per = [row_diagnostics(flat_w[r * Lk:(r + 1) * Lk], c) for r, c in enumerate(rows)]
    return {name: nest([d[name] for d in per], shape) for name in DIAGNOSTICS}


def rand_request(seed, B=2, H=None, Hkv=None, Lq=5, Lk=7, D=4, Dv=3):
    """A random well-formed request; H None means rank 3."""
    rng = random.Random(seed)
    if H is None:
        return {"query": rand_tensor(rng, [B, Lq, D]),
                "key": rand_tensor(rng, [B, Lk, D]),
                "value": rand_tensor(rng, [B, Lk, Dv])}
    Hkv = Hkv or H
    return {"query": rand_tensor(rng, [B, H, Lq, D]),
            "key": rand_tensor(rng, [B, Hkv, Lk, D]),
            "value": rand_tensor(rng, [B, Hkv, Lk, Dv])}
