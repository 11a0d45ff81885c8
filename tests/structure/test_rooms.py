#!/usr/bin/env python3
"""The include graph between attnd's rooms, computed from #include lines.

Modules run core/ <- proto/ <- server/: a file includes headers of its own
module or of modules before it.  Inside proto/ the rooms run

    proto/ (proto.h, mem.h)  <-  text/  <-  tensor/  <-  v1/, v2/  <-  body/

v1/ and v2/ side by side: neither includes the other.  A file includes
headers of its own room or of rooms below it.  Inside server/ the rooms
(server/ itself: config and clock; conn/, http/, obs/, sched/, shm/; and
main.c, which wires them all, a room of its own) may use each other in
any order that has no circle.  An include whose
file does not exist in the tree (a system header) is not an arrow.

Fails, naming the file and the line, on an arrow against the order, on a
room the order does not know, and on a circle between rooms (printed as
the rooms in order).  Its own checks run first on small made-up graphs,
so that a checker that sees nothing cannot pass.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = (".c", ".cc", ".h", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

MODULE_RANK = {"core": 0, "proto": 1, "server": 2}
# proto/'s rooms, lowest first; equal ranks are siblings (no arrows).
PROTO_RANK = {"proto": 0, "proto/text": 1, "proto/tensor": 2,
              "proto/v1": 3, "proto/v2": 3, "proto/body": 4}


def room_of(path):
    """proto/text/numscan.c -> proto/text; proto/mem.h -> proto;
    server/http/http.c -> server/http; core/attn.c -> core;
    server/main.c -> server/main."""
    if path == "server/main.c":
        return "server/main"
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def includes(root):
    """[(file, line number, included file)] for every quoted include of
    core/, proto/ and server/ that names a file of the tree."""
    out = []
    for top in MODULE_RANK:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if not n.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(d, n), root)
                with open(os.path.join(root, path), errors="replace") as f:
                    for i, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        for base in (os.path.dirname(path), ""):
                            cand = os.path.normpath(os.path.join(base, m.group(1)))
                            if os.path.isfile(os.path.join(root, cand)):
                                out.append((path, i, cand))
                                break
    return out


def against_order(edges):
    """Messages for arrows that run against the module or room order."""
    bad = []
    for src, line, dst in edges:
        a, b = src.split("/")[0], dst.split("/")[0]
        if MODULE_RANK.get(b, 9) > MODULE_RANK.get(a, 9):
            bad.append(f"{src}:{line}: {a}/ includes {dst} ({b}/ is above it)")
            continue
        ra, rb = room_of(src), room_of(dst)
        if a != "proto" or b != "proto" or ra == rb:
            continue
        for r in (ra, rb):
            if r not in PROTO_RANK:
                bad.append(f"{src}:{line}: room {r}/ is not in the order "
                           "(tests/structure/test_rooms.py, PROTO_RANK)")
        if ra in PROTO_RANK and rb in PROTO_RANK and \
                PROTO_RANK[rb] >= PROTO_RANK[ra]:
            bad.append(f"{src}:{line}: {ra}/ includes {dst}, and {rb}/ is "
                       f"{'beside' if PROTO_RANK[rb] == PROTO_RANK[ra] else 'above'} it")
    return bad


def circles(edges):
    """A circle between rooms, as a list of rooms, or None."""
    graph = {}
    for src, _, dst in edges:
        a, b = room_of(src), room_of(dst)
        if a != b:
            graph.setdefault(a, set()).add(b)
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not state.get(m):
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if not state.get(n):
            found = visit(n)
            if found:
                return found
    return None


def self_checks():
    """The checker on made-up graphs: each must find what was put in."""
    fails = []
    up = [("proto/text/numscan.c", 3, "proto/tensor/tensor.h")]
    side = [("proto/v2/v2_encode.c", 4, "proto/v1/v1.h")]
    new = [("proto/wire/x.c", 5, "proto/text/text.h")]
    core_up = [("core/attn.c", 6, "proto/proto.h")]
    down = [("proto/v2/v2_fill.c", 7, "proto/tensor/tensor.h"),
            ("server/http/http.c", 8, "proto/proto.h")]
    loop = [("server/a/x.c", 1, "server/b/y.h"),
            ("server/b/y.c", 2, "server/c/z.h"),
            ("server/c/z.c", 3, "server/a/x.h")]
    for name, edges in (("upward", up), ("sideways", side),
                        ("unknown room", new), ("core upward", core_up)):
        if not against_order(edges):
            fails.append(f"self-check: missed an arrow {name}")
    if against_order(down):
        fails.append("self-check: refused arrows that run down")
    c = circles(loop)
    if not c or c[0] != c[-1] or len(c) != 4:
        fails.append(f"self-check: missed the circle a -> b -> c (got {c})")
    if circles(down):
        fails.append("self-check: a circle where there is none")
    return fails


def main():
    passed, failed = 0, 0
    for name, msgs in (("self-checks", self_checks()),):
        for m in msgs:
            print(m)
        passed, failed = (passed + 1, failed) if not msgs else (passed, failed + 1)
    edges = includes(ROOT)
    if not any(room_of(s) == "proto/body" for s, _, _ in edges):
        print("rooms: no includes found under proto/body: is the tree here?")
        failed += 1
    bad = against_order(edges)
    for m in bad:
        print(m)
    passed, failed = (passed + 1, failed) if not bad else (passed, failed + 1)
    c = circles(edges)
    if c:
        print("a circle between rooms: " + " -> ".join(c))
        failed += 1
    else:
        passed += 1
    rooms = sorted({room_of(s) for s, _, _ in edges})
    print(f"rooms: {len(edges)} includes between {len(rooms)} rooms read")
    print(f"test_rooms: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
