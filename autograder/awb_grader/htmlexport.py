"""nbconvert's HTML exporter for the feedback, compiling each Jinja template once per process.

``nbgrader generate_feedback`` makes a new ``HTMLExporter`` for every call, and with it a new
Jinja environment that parses and compiles nbconvert's and nbgrader's HTML templates again:
about a quarter of the CPU a feedback file costs, on every graded notebook. This exporter is
``HTMLExporter`` with Jinja's own bytecode cache attached (``Environment.bytecode_cache``),
kept in memory for the process: a template is compiled the first time and its code loaded
from the cache afterwards, keyed by the template's file name and checked against a checksum of
its source (Jinja recompiles a template whose source changed). The HTML is the same
(``tests/test_feedback_hidden.py`` compares it with the stock exporter's).
"""

from __future__ import annotations

from jinja2 import BytecodeCache
from nbconvert.exporters import HTMLExporter


class _MemoryBytecodeCache(BytecodeCache):
    """Compiled templates kept in a dict (Jinja checks each one's source checksum on load)."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()

    def clear(self) -> None:
        self._code.clear()


# one cache per way of compiling (Jinja compiles differently for async rendering)
_CACHES: dict[tuple, _MemoryBytecodeCache] = {}


class CachedTemplatesHTMLExporter(HTMLExporter):
    """``HTMLExporter`` whose Jinja environment shares one in-memory bytecode cache per process."""

    def _create_environment(self):
        env = super()._create_environment()
        key = (type(self).__name__, env.is_async, tuple(sorted(env.extensions)))
        env.bytecode_cache = _CACHES.setdefault(key, _MemoryBytecodeCache())
        return env
