"""The full battery for a learner: what grading will run, on new random shapes, before grading.

Each graded test cell of an exercise runs two parts at grading: its visible check (in the
notebook) and a hidden randomized check against an independent oracle (in ``autograder/``,
which a learner on Colab does not have). The battery runs, for every test cell, the same
visible check and then a randomized check of its own (``battery.exNN``): new random sizes and
values, the batch axes, masks, Tq != Tk, d != dv and edge cases the exercise text promises,
compared with PyTorch built-ins (``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``,
``nn.TransformerEncoderLayer`` ...) or loops written independently of the solution. Its seeds
are not grading's, so it is a forecast of the grade, not the grade.

In the last cell of an exercise::

    from attention_workbook.checks import battery
    battery.check_all("05", globals())        # or check_all("05", split_heads=split_heads, ...)

prints one row per graded item: "passes" or the mistake named the way the visible hints name
it, and the points that item would earn. ``battery.run(...)`` returns the same as a
:class:`Report` (the tests read it). No warning reaches stderr: warnings are recorded and a
failing item's message lists them.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import time
import warnings
import zlib
from dataclasses import dataclass, field

import torch

from ..core import CheckFailed, call as _call  # noqa: F401 - re-exported for the exNN modules

__all__ = ["ITEMS", "POINTS", "Item", "Report", "Row", "check_all", "exercise_key", "run", "DEFAULT_SEED"]

DEFAULT_SEED = 2027        # grading's hidden checks seed their generators with small numbers (< 1000)


@dataclass(frozen=True)
class Item:
    """One graded test cell: its grade id, its points, the check it runs and the names it is given."""
    cell: str
    points: int
    check: str
    args: tuple[str, ...]


# The graded test cells of every exercise, as in the released notebooks (a test compares this
# table with the nbgrader metadata of exercises/*/*.ipynb: cell ids, points, the check called).
ITEMS: dict[str, list[Item]] = {
    "00_tensor_shapes": [
        Item("test_pairwise_dots_shape", 1, "pairwise_dots_shape", ("pairwise_dots",)),
        Item("test_pairwise_dots_values", 2, "pairwise_dots_values", ("pairwise_dots",)),
        Item("test_split_last_shape", 1, "split_last_shape", ("split_last",)),
        Item("test_split_last_values", 2, "split_last_values", ("split_last",)),
        Item("test_split_last_error", 1, "split_last_error", ("split_last",)),
        Item("test_batched_outer_shape", 1, "batched_outer_shape", ("batched_outer",)),
        Item("test_batched_outer_values", 1, "batched_outer_values", ("batched_outer",)),
        Item("test_einsum_matmul_2d", 2, "einsum_matmul_2d", ("einsum_matmul",)),
        Item("test_einsum_matmul_batched", 1, "einsum_matmul_batched", ("einsum_matmul",)),
        Item("test_center_tokens_values", 2, "center_tokens_values", ("center_tokens",)),
    ],
    "01_rnn_limitations": [
        Item("test_rnn_forward_shape", 1, "rnn_forward_shape", ("rnn_forward",)),
        Item("test_rnn_forward_values", 2, "rnn_forward_values", ("rnn_forward",)),
        Item("test_rnn_forward_h0", 1, "rnn_forward_h0", ("rnn_forward",)),
        Item("test_gradient_vs_distance_shape", 1, "gradient_vs_distance_shape", ("gradient_vs_distance",)),
        Item("test_gradient_vs_distance_single", 1, "gradient_vs_distance_single", ("gradient_vs_distance",)),
        Item("test_gradient_vs_distance_batch", 1, "gradient_vs_distance_batch", ("gradient_vs_distance",)),
    ],
    "02_attention_as_lookup": [
        Item("test_hard_lookup_single", 2, "hard_lookup_single", ("hard_lookup",)),
        Item("test_hard_lookup_batch", 1, "hard_lookup_batch", ("hard_lookup",)),
        Item("test_soft_lookup_single", 2, "soft_lookup_single", ("soft_lookup",)),
        Item("test_soft_lookup_batch", 2, "soft_lookup_batch", ("soft_lookup",)),
        Item("test_soft_lookup_temperature", 2, "soft_lookup_temperature", ("soft_lookup",)),
    ],
    "03_simplified_self_attention": [
        Item("test_loops_values", 2, "loops_values", ("simple_self_attention_loops",)),
        Item("test_loops_batch", 1, "loops_batch", ("simple_self_attention_loops",)),
        Item("test_simple_values", 2, "simple_values", ("simple_self_attention",)),
        Item("test_simple_batch", 1, "simple_batch", ("simple_self_attention",)),
        Item("test_softmax_values", 2, "softmax_values", ("softmax_self_attention",)),
        Item("test_softmax_batch", 1, "softmax_batch", ("softmax_self_attention",)),
    ],
    "04_queries_keys_values": [
        Item("test_softmax_values", 2, "softmax_values", ("softmax",)),
        Item("test_softmax_dim", 1, "softmax_dim", ("softmax",)),
        Item("test_softmax_stability", 2, "softmax_stability", ("softmax",)),
        Item("test_causal_mask", 1, "causal_mask", ("causal_mask",)),
        Item("test_padding_mask", 2, "padding_mask", ("padding_mask",)),
        Item("test_sdpa_shapes", 1, "sdpa_shapes", ("scaled_dot_product_attention",)),
        Item("test_sdpa_values", 3, "sdpa_values", ("scaled_dot_product_attention",)),
        Item("test_sdpa_causal", 2, "sdpa_causal", ("scaled_dot_product_attention",)),
        Item("test_sdpa_padding", 2, "sdpa_padding", ("scaled_dot_product_attention",)),
        Item("test_bilinear_shapes", 1, "bilinear_shapes", ("bilinear_scores",)),
        Item("test_bilinear_values", 2, "bilinear_values", ("bilinear_scores",)),
        Item("test_additive_shapes", 1, "additive_shapes", ("additive_scores",)),
        Item("test_additive_values", 2, "additive_values", ("additive_scores",)),
        Item("test_einsum_values", 2, "einsum_values", ("einsum_attention",)),
        Item("test_einsum_batch_dims", 1, "einsum_batch_dims", ("einsum_attention",)),
        Item("test_einsum_mask", 1, "einsum_mask", ("einsum_attention",)),
        Item("test_head_structure", 1, "head_structure", ("SelfAttentionHead",)),
        Item("test_head_forward", 2, "head_forward", ("SelfAttentionHead",)),
        Item("test_head_mask", 1, "head_mask", ("SelfAttentionHead",)),
    ],
    "05_multi_head_attention": [
        Item("test_split_heads_shape", 1, "split_heads_shape", ("split_heads",)),
        Item("test_split_heads_values", 2, "split_heads_values", ("split_heads",)),
        Item("test_merge_heads", 2, "merge_heads", ("merge_heads",)),
        Item("test_mha_init", 1, "mha_init", ("MultiHeadAttention",)),
        Item("test_mha_self", 3, "mha_self", ("MultiHeadAttention",)),
        Item("test_mha_weights", 1, "mha_weights", ("MultiHeadAttention",)),
        Item("test_mha_mask", 2, "mha_mask", ("MultiHeadAttention",)),
        Item("test_mha_cross", 2, "mha_cross", ("MultiHeadAttention",)),
        Item("test_mha_param_count", 1, "mha_param_count", ("mha_param_count",)),
        Item("test_from_torch", 2, "from_torch", ("from_torch", "MultiHeadAttention")),
    ],
    "06_transformer_block": [
        Item("test_sinusoidal_shape", 1, "sinusoidal_shape", ("sinusoidal_positions",)),
        Item("test_sinusoidal_values", 2, "sinusoidal_values", ("sinusoidal_positions",)),
        Item("test_layernorm_params", 1, "layernorm_params", ("LayerNorm",)),
        Item("test_layernorm_values", 2, "layernorm_values", ("LayerNorm",)),
        Item("test_layernorm_eps", 1, "layernorm_eps", ("LayerNorm",)),
        Item("test_feedforward_structure", 1, "feedforward_structure", ("FeedForward",)),
        Item("test_feedforward_values", 2, "feedforward_values", ("FeedForward",)),
        Item("test_block_pre_ln", 2, "block_pre_ln", ("TransformerBlock",)),
        Item("test_block_post_ln", 2, "block_post_ln", ("TransformerBlock",)),
        Item("test_block_mask", 1, "block_mask", ("TransformerBlock",)),
        Item("test_block_param_count", 2, "block_param_count", ("block_param_count",)),
        Item("test_from_torch_post_ln", 2, "from_torch_post_ln", ("from_torch_encoder_layer",)),
        Item("test_from_torch_pre_ln", 1, "from_torch_pre_ln", ("from_torch_encoder_layer",)),
    ],
    "07_encoder_decoder": [
        Item("test_decoder_shapes", 1, "decoder_shapes", ("DecoderBlock",)),
        Item("test_decoder_values", 3, "decoder_values", ("DecoderBlock",)),
        Item("test_decoder_causal", 1, "decoder_causal", ("DecoderBlock",)),
        Item("test_decoder_masks", 2, "decoder_masks", ("DecoderBlock",)),
        Item("test_seq2seq_shapes", 1, "seq2seq_shapes", ("Seq2SeqTransformer",)),
        Item("test_seq2seq_causal", 1, "seq2seq_causal", ("Seq2SeqTransformer",)),
        Item("test_seq2seq_source", 1, "seq2seq_source", ("Seq2SeqTransformer",)),
        Item("test_seq2seq_padding", 1, "seq2seq_padding", ("Seq2SeqTransformer",)),
        Item("test_greedy_single", 1, "greedy_single", ("greedy_decode",)),
        Item("test_greedy_batch", 2, "greedy_batch", ("greedy_decode",)),
        Item("test_greedy_last_position", 1, "greedy_last_position", ("greedy_decode",)),
    ],
    "08_train_a_gpt": [
        Item("test_get_batch_shift", 2, "get_batch_shift", ("get_batch",)),
        Item("test_get_batch_random", 1, "get_batch_random", ("get_batch",)),
        Item("test_lr_at_warmup", 1, "lr_at_warmup", ("lr_at",)),
        Item("test_lr_at_cosine", 2, "lr_at_cosine", ("lr_at",)),
        Item("test_gpt_forward", 2, "gpt_forward", ("GPT",)),
        Item("test_gpt_causal", 2, "gpt_causal", ("GPT",)),
        Item("test_gpt_positions_tying", 2, "gpt_positions_and_tying", ("GPT",)),
        Item("test_gpt_overfits", 1, "gpt_overfits", ("GPT",)),
        Item("test_generate_basics", 2, "generate_basics", ("generate",)),
        Item("test_generate_sampling", 2, "generate_sampling", ("generate",)),
    ],
    "09_attention_at_scale": [
        Item("test_online_softmax_values", 2, "online_softmax_values", ("online_softmax",)),
        Item("test_online_softmax_edge", 1, "online_softmax_edge", ("online_softmax",)),
        Item("test_tiled_attention_values", 2, "tiled_attention_values", ("tiled_attention",)),
        Item("test_tiled_attention_mask", 2, "tiled_attention_mask", ("tiled_attention",)),
        Item("test_gqa_as_mha", 2, "gqa_as_mha", ("GroupedQueryAttention",)),
        Item("test_gqa_groups", 2, "gqa_groups", ("GroupedQueryAttention",)),
        Item("test_apply_rope_values", 2, "apply_rope_values", ("apply_rope",)),
        Item("test_apply_rope_positions", 1, "apply_rope_positions", ("apply_rope",)),
        Item("test_sliding_window_mask", 1, "sliding_window_mask_values", ("sliding_window_mask",)),
        Item("test_generate_cached_equal", 2, "generate_cached_equal", ("generate_cached",)),
        Item("test_generate_cached_steps", 1, "generate_cached_steps", ("generate_cached",)),
    ],
}

POINTS: dict[str, dict[str, int]] = {ex: {it.cell: it.points for it in items} for ex, items in ITEMS.items()}


def exercise_key(exercise) -> str:
    """``5``, ``"05"``, ``"ex05"`` or ``"05_multi_head_attention"`` -> ``"05_multi_head_attention"``."""
    text = str(exercise).strip()
    if text.startswith("ex"):
        text = text[2:]
    num = text.split("_")[0]
    if num.isdigit():
        for key in ITEMS:
            if int(key[:2]) == int(num):
                return key
    raise ValueError(f"no exercise {exercise!r}: use its number, 0 to {len(ITEMS) - 1}")


@dataclass
class Row:
    cell: str
    points: int
    earned: int
    verdict: str                 # "passes", or the failure (title and hint)
    part: str = ""               # "visible" or "randomized": which part failed
    seconds: float = 0.0


@dataclass
class Report:
    exercise: str
    seed: int
    rows: list[Row] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)     # what Python warned while the battery ran

    @property
    def earned(self) -> int:
        return sum(r.earned for r in self.rows)

    @property
    def total(self) -> int:
        return sum(r.points for r in self.rows)

    def failed(self) -> list[Row]:
        return [r for r in self.rows if not r.earned]

    def table(self) -> str:
        width = max(len(r.cell) for r in self.rows) if self.rows else 10
        out = [f"Battery for {self.exercise} (seed {self.seed}): the randomized checks grading runs, on new "
               f"random shapes; a forecast, not your grade.",
               f"{'graded item':<{width}}  points  result"]
        for r in self.rows:
            mark = "\u2714 passes" if r.earned else "\u2718 " + _indent(r.verdict, width + 12)
            out.append(f"{r.cell:<{width}}  {r.earned:>2} / {r.points:<2} {mark}")
        out.append(f"{'total':<{width}}  {self.earned:>2} / {self.total:<2}"
                   + ("  every item passes" if self.earned == self.total else
                      f"  {len(self.failed())} item(s) would lose points"))
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def _indent(text: str, n: int) -> str:
    return ("\n" + " " * n).join(text.splitlines())


def _verdict(e: CheckFailed) -> str:
    text = e.title
    if "is not implemented yet" in text:     # one line is enough: nothing to diagnose yet
        return text
    if e.details:
        text += "\n  " + "\n  ".join(e.details[:3])
    if e.hint:
        text += f"\nHint: {e.hint}"
    if e.reread:
        text += f"\nReread: {e.reread}"
    return text


def _seed(seed: int, exercise: str, cell: str) -> int:
    """A generator seed per item, far from grading's (which are below 1000)."""
    return 1_000_003 * (seed + 1) + zlib.crc32(f"{exercise}/{cell}".encode()) % 1_000_000


def _own(fn, name: str) -> None:
    mod = getattr(fn, "__module__", "") or ""
    if mod.startswith(("attention_workbook", "awb_grader", "torch")):
        raise CheckFailed(f"{name} is imported from {mod}, not written in this notebook",
                          hint="grading scores your own implementation: an imported reference earns 0")


def _run_item(exercise: str, item: Item, answers: dict, seed: int) -> Row:
    num = exercise[:2]
    visible = importlib.import_module(f"attention_workbook.checks.ex{num}")
    randomized = importlib.import_module(f"attention_workbook.checks.battery.ex{num}")
    t0 = time.perf_counter()
    missing = [a for a in item.args if a not in answers]
    if missing:
        return Row(item.cell, item.points, 0, f"{', '.join(missing)} is not defined: run the cell that defines it "
                   "(and every cell above it), then this one", "visible")
    args = [answers[a] for a in item.args]
    part = "visible"
    try:
        for a, name in zip(args, item.args):
            _own(a, name)
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):  # green line; stray output
            getattr(visible, item.check)(*args)
            part = "randomized"
            g = torch.Generator().manual_seed(_seed(seed, exercise, item.cell))
            getattr(randomized, item.check)(*args, g=g)
        if err.getvalue().strip():
            raise CheckFailed("your code wrote to stderr while it ran",
                              details=[err.getvalue().strip().splitlines()[0][:160]],
                              hint="nbgrader scores a test cell 0 when anything reaches stderr: remove that output")
    except CheckFailed as e:
        label = "" if part == "visible" else "randomized test: "
        return Row(item.cell, item.points, 0, label + _verdict(e), part, time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - the battery must report, never crash the notebook
        return Row(item.cell, item.points, 0, f"{part} part raised {type(e).__name__}: {e}", part,
                   time.perf_counter() - t0)
    return Row(item.cell, item.points, item.points, "passes", "", time.perf_counter() - t0)


def run(exercise, namespace: dict | None = None, *, seed: int = DEFAULT_SEED, progress: bool = True,
        **answers) -> Report:
    """Run the battery of one exercise on the learner's answers (looked up by name in
    ``namespace``, usually ``globals()``, or given as keywords) and return the :class:`Report`."""
    key = exercise_key(exercise)
    found = dict(namespace or {})
    found.update(answers)
    report = Report(key, seed)
    items = ITEMS[key]
    bar = None
    if progress:
        from ...progress import tqdm
        bar = tqdm(total=len(items), desc=f"battery {key[:2]}", delay=2, file=sys.stdout, leave=False)
    torch_threads = torch.get_num_threads()
    rng_state = torch.random.get_rng_state()
    try:
        with warnings.catch_warnings(record=True) as seen:   # never printed: listed in the report
            warnings.simplefilter("always")
            for item in items:
                report.rows.append(_run_item(key, item, found, seed))
                if bar is not None:
                    bar.update(1)
        report.warnings = list(dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}"
                                             for w in seen if str(w.message)))
    finally:
        if bar is not None:
            bar.close()
        torch.set_num_threads(torch_threads)
        torch.random.set_rng_state(rng_state)     # the learner's own random stream is left as it was
    return report


def check_all(exercise, namespace: dict | None = None, *, seed: int = DEFAULT_SEED, **answers) -> None:
    """Print the battery's table for one exercise (see the module's docstring).

    Skipped while nbgrader validates or grades the notebook (``NBGRADER_EXECUTION`` set): the
    grade comes from the test cells, and grading time stays short."""
    if os.environ.get("NBGRADER_EXECUTION"):
        print("The battery is skipped while the notebook is graded.")
        return
    report = run(exercise, namespace, seed=seed, **answers)
    print(report.table())
    if report.warnings:
        print("Python warned while your code ran (no points are lost for warnings):")
        for w in report.warnings[:5]:
            print(f"  {w}")
