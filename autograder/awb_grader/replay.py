"""The student side of an outside-the-kernel verdict (see ``verdict.py``); runs in the sandbox.

Reads the student's code cells, executes them, then answers calls: the grader sends inputs
it chose (tensors, numbers, tuples: ``torch.save`` frames), this process runs the student's
function on them and sends back whatever it returned. The *comparison* happens in the grader's
own process, so nothing the student's code patches here can change a verdict.

Frames on stdin/stdout: 4-byte big-endian length + a ``torch.save`` payload. The student's
prints go to stderr (stdout is the channel).
"""

from __future__ import annotations

import io
import os
import struct
import traceback


def _read(fh):
    head = fh.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    return fh.read(n)


def _write(fh, obj) -> None:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    fh.write(struct.pack(">I", len(data)) + data)
    fh.flush()


def main() -> None:
    channel_out = os.fdopen(os.dup(1), "wb")
    channel_in = os.fdopen(os.dup(0), "rb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(2, 1)                  # the student's prints -> stderr
    os.dup2(devnull, 0)
    import json

    import torch

    cells = json.loads(_read(channel_in).decode())
    ns: dict = {"__name__": "__main__"}
    for src in cells:
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            exec(compile("\n".join(lines), "<student cell>", "exec"), ns)  # noqa: S102 - the point
        except BaseException:  # noqa: BLE001 - a failing cell fails here as it did in the kernel
            traceback.print_exc()
    import types

    names = {k: ("function" if isinstance(v, types.FunctionType) else "class" if isinstance(v, type) else "other")
             for k, v in ns.items() if not k.startswith("_")}
    _write(channel_out, {"ready": names})
    while True:
        raw = _read(channel_in)
        if raw is None:
            return
        req = torch.load(io.BytesIO(raw), weights_only=True)
        try:
            out = ns[req["name"]](*req["args"], **req["kwargs"])
            try:
                _write(channel_out, {"ok": out})
            except Exception as e:  # noqa: BLE001
                _write(channel_out, {"error": f"returned something that is not tensors/numbers ({type(e).__name__})"})
        except BaseException as e:  # noqa: BLE001
            _write(channel_out, {"error": f"{type(e).__name__}: {str(e)[:300]}", "type": type(e).__name__})


if __name__ == "__main__":
    main()
