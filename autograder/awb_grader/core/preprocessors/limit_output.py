"""Output truncation for autograded notebooks (used by the sandboxed cohort grading)."""

from __future__ import annotations

import json

from nbgrader.preprocessors import LimitOutput
from traitlets import Integer


class LimitOutputBytes(LimitOutput):
    """nbgrader's LimitOutput (lines) plus a limit in bytes per cell: one `print` of 50 MB is a
    single line, so a line limit alone keeps it all."""

    max_bytes = Integer(100_000, help="bytes of text output kept per cell").tag(config=True)

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.cell_type != "code":
            return cell, resources
        budget = self.max_bytes
        kept = []
        for out in cell.outputs:
            if out.output_type == "stream":
                if budget <= 0:
                    continue
                if len(out.text) > budget:
                    out.text = (
                        out.text[:budget] + f"\n... output truncated by the grader (over {self.max_bytes} bytes) ...\n"
                    )
                budget -= len(out.text)
            elif out.output_type in ("display_data", "execute_result"):
                data = out.get("data", {})
                for mime in list(data):
                    value = data[mime]
                    size = len(value) if isinstance(value, str) else len(json.dumps(value))
                    if size > max(budget, 0) * 10 and mime != "text/plain":
                        del data[mime]        # a huge image or HTML blob: dropped
                    elif isinstance(value, str) and len(value) > budget:
                        data[mime] = value[:max(budget, 0)] + "\n... output truncated by the grader ..."
                if not data:
                    data["text/plain"] = "... output removed by the grader (too large) ..."
                budget -= sum(len(v) for v in data.values() if isinstance(v, str))
            elif out.output_type == "error":
                out.evalue = out.get("evalue", "")[:2000]
                out.traceback = [t[:5000] for t in out.get("traceback", [])]
            kept.append(out)
        cell.outputs = kept
        return cell, resources
