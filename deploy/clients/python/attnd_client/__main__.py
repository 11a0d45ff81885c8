"""python3 -m attnd_client [URL]: readiness, then the README's example."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import AttndClient, AttndError


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m attnd_client",
        description="Asks attnd whether it is ready, then sends the README's example "
                    "request and prints its output and weights.")
    ap.add_argument("url", nargs="?", default="http://127.0.0.1:8000",
                    help="attnd's address (default: %(default)s)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        client = AttndClient(args.url)
    except ValueError as e:  # not a URL the client takes: usage, exit 2
        ap.error(str(e))
    with client as c:
        try:
            print("ready:", c.ready())
            r = c.attention([[[1, 0], [0, 2]]], [[[1, 1], [2, 0], [0, 3]]],
                            [[[1, 0], [0, 1], [1, 1]]], valid_lens=[2])
        except AttndError as e:
            print("attnd_client:", e, file=sys.stderr)
            return 1
        print("output:", r["output"].tolist())
        print("weights:", r["weights"].tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
