"""Shortcuts: submissions that hand a graded item to the workbook's reference implementation, or
tamper with the checks, for exercises 04-09.

Every student installs ``attention_workbook``, which holds the reference of nearly every graded
item. Each entry below takes one shortcut in one of its forms:

* ``delegation: subclass``  the graded class only subclasses the package's class;
* ``delegation: wrapper``   the graded function calls the package's function;
* ``delegation: alias``     the package's object imported under another name, then used;
* ``delegation: getattr``   ``getattr(<package module>, "name")`` instead of an import;
* ``delegation: importlib`` the package's module fetched with ``importlib.import_module``,
                            ``__import__`` or ``sys.modules`` under its plain name;
* ``delegation: composition`` the graded class is the student's own ``nn.Module`` that holds an
                            instance of the package's class and forwards to it;
* ``tampering: encoded``    nothing implemented; the check modules imported under base64-encoded
                            names (``importlib.import_module``) and their public functions
                            rebound with ``setattr`` (what makes checks pass in the kernel);
* ``tampering: encoded delegation``  a correct-looking submission whose one import of the
                            package's reference is base64-encoded (what a static reading of
                            names cannot see).

``tests/test_shortcuts.py`` grades all of them in one cohort run (the real ``cohort`` command,
sandbox on, outside verdicts) together with honest students: each must lose every cell in
``must_fail`` and be flagged with ``flag`` in ``flags.csv``; for the delegation forms the
student's own kernel (plain ``nbgrader autograde``) must already take those points
(``in_kernel``), since the visible check says so at once.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Shortcut:
    id: str
    assignment: str
    kind: str
    cells: dict                      # answer cell id -> code (the other answers: the solution)
    must_fail: tuple[str, ...]       # test cells that must end with 0 points
    flag: str                        # a phrase flags.csv must show for this submission
    description: str
    unanswered: bool = False         # leave every other answer cell as released (implements nothing)
    in_kernel: bool = True           # plain nbgrader autograde already takes the must_fail points
    extra: dict = field(default_factory=dict)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _tamper(nn: str) -> str:
    """The check modules of exercise ``nn`` imported under encoded names; every public function
    they define replaced by one that accepts anything (the static scan of names sees none of it)."""
    return f'''import importlib, base64
for _enc in ("{_b64(f"attention_workbook.checks.ex{nn}")}", "{_b64(f"awb_grader.hidden.ex{nn}")}"):
    try:
        _mod = importlib.import_module(base64.b64decode(_enc).decode())
    except Exception:
        continue
    _alias = _mod
    for _name in dir(_alias):
        _obj = getattr(_alias, _name)
        if not _name.startswith("_") and callable(_obj) and getattr(_obj, "__module__", "") == _alias.__name__:
            setattr(_alias, _name, lambda *a, **k: None)
'''


def _encoded_import(module: str, name: str, alias: str) -> str:
    return (f"import importlib, base64\n"
            f"{alias} = getattr(importlib.import_module(base64.b64decode(\"{_b64(module)}\").decode()), "
            f"base64.b64decode(\"{_b64(name)}\").decode())\n")


A4, A5, A6, A7, A8, A9 = ("04_queries_keys_values", "05_multi_head_attention", "06_transformer_block",
                          "07_encoder_decoder", "08_train_a_gpt", "09_attention_at_scale")
_SDPA = ("test_sdpa_shapes", "test_sdpa_values", "test_sdpa_causal", "test_sdpa_padding")
_SOFTMAX = ("test_softmax_values", "test_softmax_dim", "test_softmax_stability")
_HEAD = ("test_head_structure", "test_head_forward", "test_head_mask")
_MHA = ("test_mha_init", "test_mha_self", "test_mha_weights", "test_mha_mask", "test_mha_cross")
_BLOCK = ("test_block_pre_ln", "test_block_post_ln", "test_block_mask")
_LN = ("test_layernorm_params", "test_layernorm_values", "test_layernorm_eps")
_DEC = ("test_decoder_shapes", "test_decoder_values", "test_decoder_causal", "test_decoder_masks")
_S2S = ("test_seq2seq_shapes", "test_seq2seq_causal", "test_seq2seq_source", "test_seq2seq_padding")
_GREEDY = ("test_greedy_single", "test_greedy_batch", "test_greedy_last_position")
_GPT = ("test_gpt_forward", "test_gpt_causal", "test_gpt_positions_tying", "test_gpt_overfits")
_GEN = ("test_generate_basics", "test_generate_sampling")
_LR = ("test_lr_at_warmup", "test_lr_at_cosine")
_BATCH = ("test_get_batch_shift", "test_get_batch_random")
_ONLINE = ("test_online_softmax_values", "test_online_softmax_edge")
_TILED = ("test_tiled_attention_values", "test_tiled_attention_mask")
_GQA = ("test_gqa_as_mha", "test_gqa_groups")
_ROPE = ("test_apply_rope_values", "test_apply_rope_positions")
_WINDOW = ("test_sliding_window_mask",)
_CACHED = ("test_generate_cached_equal", "test_generate_cached_steps")
_REF = "the workbook's reference"
_TAMPER = "tampering: answer cells hide what they run"


def _all_cells(*groups):
    return tuple(c for g in groups for c in g)


SHORTCUTS = [
    # -- 04 ------------------------------------------------------------------------------------
    Shortcut("sdpa_wraps_reference", A4, "delegation: wrapper", {"scaled_dot_product_attention": '''import attention_workbook.qkv


def scaled_dot_product_attention(q, k, v, mask=None):
    return attention_workbook.qkv.attention(q, k, v, mask)
'''}, _SDPA, _REF, "scaled_dot_product_attention calls attention_workbook.qkv.attention"),
    Shortcut("softmax_alias_import", A4, "delegation: alias", {"softmax": '''from attention_workbook.qkv import stable_softmax as _softmax


def softmax(x, dim=-1):
    return _softmax(x, dim)
'''}, _SOFTMAX, _REF, "softmax is the package's stable_softmax imported under another name"),
    Shortcut("head_subclasses_reference", A4, "delegation: subclass", {"SelfAttentionHead": '''from attention_workbook import mha


class SelfAttentionHead(mha.Head):
    def __init__(self, d_model, d_head):
        super().__init__(d_model, d_head, bias=False)

    def forward(self, x, mask=None):
        return super().forward(x, x, mask)[0]
'''}, _HEAD, _REF, "SelfAttentionHead subclasses the package's Head (mha.Head)"),
    Shortcut("sdpa_getattr", A4, "delegation: getattr", {"scaled_dot_product_attention": '''import attention_workbook.qkv


def scaled_dot_product_attention(q, k, v, mask=None):
    return getattr(attention_workbook.qkv, "attention")(q, k, v, mask)
'''}, _SDPA, _REF, "scaled_dot_product_attention fetches the package's attention with getattr"),
    Shortcut("tamper_encoded_04", A4, "tampering: encoded", {"softmax": _tamper("04") + '''

def softmax(x, dim=-1):
    raise NotImplementedError()
'''}, _all_cells(_SOFTMAX, ("test_causal_mask", "test_padding_mask"), _SDPA, _HEAD), _TAMPER,
        "implements nothing; the check modules imported under base64 names and patched with setattr",
        unanswered=True, in_kernel=False),
    Shortcut("encoded_delegation_04", A4, "tampering: encoded delegation", {"scaled_dot_product_attention":
        _encoded_import("attention_workbook.qkv", "attention", "_attention") + '''

def scaled_dot_product_attention(q, k, v, mask=None):
    return _attention(q, k, v, mask)
'''}, _all_cells(_SOFTMAX, _SDPA, _HEAD), _TAMPER,
        "the package's attention fetched under base64-encoded names", in_kernel=False),

    Shortcut("mask_importlib", A4, "delegation: importlib", {"causal_mask": '''import importlib

_qkv = importlib.import_module("attention_workbook.qkv")


def causal_mask(T):
    return _qkv.causal_mask(T)
'''}, ("test_causal_mask",), _REF, "causal_mask calls the package's, its module fetched with importlib"),
    Shortcut("head_holds_reference", A4, "delegation: composition", {"SelfAttentionHead": '''from attention_workbook import mha


class SelfAttentionHead(nn.Module):
    def __init__(self, d_model, d_head):
        super().__init__()
        self.head = mha.Head(d_model, d_head, bias=False)

    def forward(self, x, mask=None):
        return self.head(x, x, mask)[0]
'''}, _HEAD, _REF, "SelfAttentionHead is an nn.Module holding the package's Head and calling it"),

    # -- 05 ------------------------------------------------------------------------------------
    Shortcut("mha_subclasses_reference", A5, "delegation: subclass", {"MultiHeadAttention": '''import attention_workbook.mha


class MultiHeadAttention(attention_workbook.mha.MultiHeadAttention):
    pass
'''}, _MHA, _REF, "MultiHeadAttention only subclasses the package's class"),
    Shortcut("split_heads_wraps_reference", A5, "delegation: wrapper", {"split_heads": '''import attention_workbook.mha


def split_heads(x, n_heads):
    return attention_workbook.mha.split_heads(x, n_heads)
'''}, ("test_split_heads_shape", "test_split_heads_values"), _REF, "split_heads calls the package's split_heads"),
    Shortcut("merge_heads_alias_import", A5, "delegation: alias", {"merge_heads": '''from attention_workbook.mha import merge_heads as _merge


def merge_heads(x):
    return _merge(x)
'''}, ("test_merge_heads",), _REF, "merge_heads is the package's, imported under another name"),
    Shortcut("param_count_getattr", A5, "delegation: getattr", {"mha_param_count": '''import attention_workbook.mha as _m


def mha_param_count(d_model, bias=True):
    return getattr(_m, "mha_param_count")(d_model, bias)
'''}, ("test_mha_param_count",), _REF, "mha_param_count fetches the package's function with getattr"),
    Shortcut("tamper_encoded_05", A5, "tampering: encoded", {"split_heads": _tamper("05") + '''

def split_heads(x, n_heads):
    raise NotImplementedError()
'''}, _all_cells(("test_split_heads_shape", "test_split_heads_values", "test_merge_heads"), _MHA,
                 ("test_mha_param_count", "test_from_torch")), _TAMPER,
        "implements nothing; the check modules imported under base64 names and patched with setattr",
        unanswered=True, in_kernel=False),
    Shortcut("encoded_delegation_05", A5, "tampering: encoded delegation", {"MultiHeadAttention":
        _encoded_import("attention_workbook.mha", "MultiHeadAttention", "_Base") + '''

class MultiHeadAttention(_Base):
    pass
'''}, _all_cells(_MHA, ("test_split_heads_shape", "test_from_torch")), _TAMPER,
        "MultiHeadAttention subclasses the package's class fetched under base64-encoded names", in_kernel=False),

    Shortcut("merge_heads_importlib", A5, "delegation: importlib", {"merge_heads": '''import importlib


def merge_heads(x):
    return importlib.import_module("attention_workbook.mha").merge_heads(x)
'''}, ("test_merge_heads",), _REF, "merge_heads calls the package's, fetched with importlib inside the function"),
    Shortcut("from_torch_sys_modules", A5, "delegation: importlib", {"from_torch": '''import sys
import attention_workbook.mha


def from_torch(mha):
    return sys.modules["attention_workbook.mha"].from_torch(mha)
'''}, ("test_from_torch",), _REF, "from_torch calls the package's, its module read from sys.modules"),
    Shortcut("mha_holds_reference", A5, "delegation: composition", {"MultiHeadAttention": '''from attention_workbook import mha as _ref


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.inner = _ref.MultiHeadAttention(d_model, n_heads, bias=bias)

    def forward(self, x, kv=None, mask=None):
        return self.inner(x, kv, mask)
'''}, _MHA, _REF, "MultiHeadAttention is an nn.Module holding the package's and forwarding to it"),

    # -- 06 ------------------------------------------------------------------------------------
    Shortcut("layernorm_subclasses_reference", A6, "delegation: subclass", {"LayerNorm": '''import attention_workbook.blocks


class LayerNorm(attention_workbook.blocks.LayerNorm):
    pass
'''}, _LN, _REF, "LayerNorm only subclasses the package's LayerNorm"),
    Shortcut("positions_wrap_reference", A6, "delegation: wrapper", {"sinusoidal_positions": '''from attention_workbook import blocks


def sinusoidal_positions(T, d_model):
    return blocks.sinusoidal_positions(T, d_model)
'''}, ("test_sinusoidal_shape", "test_sinusoidal_values"), _REF, "sinusoidal_positions calls the package's function"),
    Shortcut("block_alias_import", A6, "delegation: alias", {"TransformerBlock": '''from attention_workbook.blocks import TransformerBlock as _Block


class TransformerBlock(_Block):
    pass
'''}, _BLOCK, _REF, "TransformerBlock subclasses the package's block imported under another name"),
    Shortcut("loader_getattr", A6, "delegation: getattr", {"from_torch_encoder_layer": '''import attention_workbook


def from_torch_encoder_layer(layer):
    return getattr(attention_workbook.blocks, "from_torch_encoder_layer")(layer)
'''}, ("test_from_torch_post_ln", "test_from_torch_pre_ln"), _REF,
        "from_torch_encoder_layer fetches the package's loader with getattr"),
    Shortcut("tamper_encoded_06", A6, "tampering: encoded", {"sinusoidal_positions": _tamper("06") + '''

def sinusoidal_positions(T, d_model):
    raise NotImplementedError()
'''}, _all_cells(("test_sinusoidal_shape", "test_sinusoidal_values"), _LN, _BLOCK,
                 ("test_block_param_count", "test_from_torch_post_ln")), _TAMPER,
        "implements nothing; the check modules imported under base64 names and patched with setattr",
        unanswered=True, in_kernel=False),
    Shortcut("encoded_delegation_06", A6, "tampering: encoded delegation", {"TransformerBlock":
        _encoded_import("attention_workbook.blocks", "TransformerBlock", "_Base") + '''

class TransformerBlock(_Base):
    pass
'''}, _all_cells(_BLOCK, _LN), _TAMPER,
        "TransformerBlock subclasses the package's block fetched under base64-encoded names", in_kernel=False),

    Shortcut("param_count_dunder_import", A6, "delegation: importlib", {"block_param_count": '''def block_param_count(d_model, d_ff, bias=True):
    blocks = __import__("attention_workbook.blocks", fromlist=["block_param_count"])
    return blocks.block_param_count(d_model, d_ff, bias)
'''}, ("test_block_param_count",), _REF, "block_param_count calls the package's, its module fetched with __import__"),
    Shortcut("feedforward_holds_reference", A6, "delegation: composition", {"FeedForward": '''import attention_workbook.blocks as _blocks


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = _blocks.FeedForward(d_model, d_ff, dropout)

    def forward(self, x):
        return self.net(x)
'''}, ("test_feedforward_structure", "test_feedforward_values"), _REF,
        "FeedForward is an nn.Module holding the package's FeedForward and calling it"),

    # -- 07 ------------------------------------------------------------------------------------
    Shortcut("decoder_subclasses_reference", A7, "delegation: subclass", {"DecoderBlock": '''import attention_workbook.blocks


class DecoderBlock(attention_workbook.blocks.DecoderBlock):
    pass
'''}, _DEC, _REF, "DecoderBlock only subclasses the package's DecoderBlock"),
    Shortcut("greedy_wraps_reference", A7, "delegation: wrapper", {"greedy_decode": '''from attention_workbook import blocks as reference


def greedy_decode(model, src, max_len, bos_id, eos_id):
    return reference.greedy_decode(model, src, max_len, bos_id, eos_id)
'''}, _GREEDY, _REF, "greedy_decode calls the package's greedy_decode"),
    Shortcut("seq2seq_alias_import", A7, "delegation: alias", {"Seq2SeqTransformer": '''from attention_workbook.blocks import Seq2SeqConfig as _Config, Seq2SeqTransformer as _Model


class Seq2SeqTransformer(_Model):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=32, pad_id=0):
        super().__init__(_Config(src_vocab, tgt_vocab, d_model, n_heads, d_ff, n_layers, n_layers, max_len,
                                 pad_id=pad_id))
'''}, _S2S, _REF, "Seq2SeqTransformer subclasses the package's model imported under another name"),
    Shortcut("decoder_getattr", A7, "delegation: getattr", {"DecoderBlock": '''import attention_workbook


class DecoderBlock(getattr(attention_workbook.blocks, "DecoderBlock")):
    pass
'''}, _DEC, _REF, "DecoderBlock subclasses the package's class fetched with getattr"),
    Shortcut("tamper_encoded_07", A7, "tampering: encoded", {"DecoderBlock": _tamper("07") + '''

class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
        super().__init__()
        raise NotImplementedError()
'''}, _all_cells(_DEC, _S2S, _GREEDY), _TAMPER,
        "implements nothing; the check modules imported under base64 names and patched with setattr",
        unanswered=True, in_kernel=False),
    Shortcut("encoded_delegation_07", A7, "tampering: encoded delegation", {"greedy_decode":
        _encoded_import("attention_workbook.blocks", "greedy_decode", "_decode") + '''

def greedy_decode(model, src, max_len, bos_id, eos_id):
    return _decode(model, src, max_len, bos_id, eos_id)
'''}, _all_cells(_GREEDY, _DEC), _TAMPER,
        "greedy_decode calls the package's function fetched under base64-encoded names", in_kernel=False),

    Shortcut("decoder_importlib", A7, "delegation: importlib", {"DecoderBlock": '''import importlib


class DecoderBlock(importlib.import_module("attention_workbook.blocks").DecoderBlock):
    pass
'''}, _DEC, _REF, "DecoderBlock subclasses the package's class, its module fetched with importlib"),
    Shortcut("seq2seq_holds_reference", A7, "delegation: composition", {"Seq2SeqTransformer": '''from attention_workbook import blocks


class Seq2SeqTransformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=128, n_layers=2, max_len=32, pad_id=0):
        super().__init__()
        cfg = blocks.Seq2SeqConfig(src_vocab, tgt_vocab, d_model, n_heads, d_ff, n_layers, n_layers, max_len,
                                   pad_id=pad_id)
        self.model = blocks.Seq2SeqTransformer(cfg)

    def forward(self, src, tgt):
        return self.model(src, tgt)
'''}, _S2S, _REF, "Seq2SeqTransformer is an nn.Module holding the package's model and forwarding to it"),

    # -- 08 ------------------------------------------------------------------------------------
    Shortcut("gpt_subclasses_reference", A8, "delegation: subclass", {"GPT": '''from attention_workbook import gpt as _gpt


class GPT(_gpt.GPT):
    pass
'''}, _GPT, _REF, "GPT only subclasses the package's GPT"),
    Shortcut("lr_at_wraps_reference", A8, "delegation: wrapper", {"lr_at": '''import attention_workbook.gpt


def lr_at(step, warmup_steps, max_steps, max_lr, min_lr):
    return attention_workbook.gpt.lr_at(step, warmup_steps, max_steps, max_lr, min_lr)
'''}, _LR, _REF, "lr_at calls the package's schedule"),
    Shortcut("get_batch_alias_import", A8, "delegation: alias", {"get_batch": '''from attention_workbook.gpt import get_batch as _windows


def get_batch(data, block_size, batch_size, generator=None):
    return _windows(data, block_size, batch_size, generator)
'''}, _BATCH, _REF, "get_batch is the package's, imported under another name"),
    Shortcut("generate_getattr", A8, "delegation: getattr", {"generate": '''import attention_workbook.gpt


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    return getattr(attention_workbook.gpt, "generate")(model, idx, max_new_tokens, temperature=temperature,
                                                       top_k=top_k, generator=generator)
'''}, _GEN, _REF, "generate fetches the package's sampler with getattr"),
    Shortcut("tamper_encoded_08", A8, "tampering: encoded", {"get_batch": _tamper("08") + '''

def get_batch(data, block_size, batch_size, generator=None):
    raise NotImplementedError()
'''}, _all_cells(_BATCH, _LR, _GPT, _GEN), _TAMPER,
        "implements nothing; the check modules imported under base64 names and patched with setattr",
        unanswered=True, in_kernel=False),
    Shortcut("encoded_delegation_08", A8, "tampering: encoded delegation", {"generate":
        _encoded_import("attention_workbook.gpt", "generate", "_sample") + '''

def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    return _sample(model, idx, max_new_tokens, temperature=temperature, top_k=top_k, generator=generator)
'''}, _all_cells(_GEN, _LR, _GPT), _TAMPER,
        "generate calls the package's sampler fetched under base64-encoded names", in_kernel=False),
    Shortcut("lr_at_importlib", A8, "delegation: importlib", {"lr_at": '''import importlib

_schedule = getattr(importlib.import_module("attention_workbook.gpt"), "lr_at")


def lr_at(step, warmup_steps, max_steps, max_lr, min_lr):
    return _schedule(step, warmup_steps, max_steps, max_lr, min_lr)
'''}, _LR, _REF, "lr_at calls the package's schedule fetched with importlib and getattr"),
    Shortcut("gpt_holds_reference", A8, "delegation: composition", {"GPT": '''import attention_workbook.gpt


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, d_model, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.inner = attention_workbook.gpt.GPT(vocab_size, block_size, n_layer, n_head, d_model, dropout)

    def forward(self, idx, targets=None):
        return self.inner(idx, targets)
'''}, _GPT, _REF, "GPT is an nn.Module holding the package's GPT and forwarding to it"),
    # -- 09 ------------------------------------------------------------------------------------
    Shortcut("gqa_subclasses_reference", A9, "delegation: subclass", {"GroupedQueryAttention": '''import attention_workbook.inference


class GroupedQueryAttention(attention_workbook.inference.GroupedQueryAttention):
    pass
'''}, _GQA, _REF, "GroupedQueryAttention only subclasses the package's class"),
    Shortcut("online_softmax_wraps_reference", A9, "delegation: wrapper", {"online_softmax": '''import attention_workbook.inference


def online_softmax(x, block=4):
    return attention_workbook.inference.online_softmax(x, block)
'''}, _ONLINE, _REF, "online_softmax calls the package's online_softmax"),
    Shortcut("rope_alias_import", A9, "delegation: alias", {"apply_rope": '''from attention_workbook.inference import apply_rope as _rotate


def apply_rope(x, positions=None, base=10000.0):
    return _rotate(x, positions, base)
'''}, _ROPE, _REF, "apply_rope is the package's, imported under another name"),
    Shortcut("tiled_getattr", A9, "delegation: getattr", {"tiled_attention": '''import attention_workbook.inference


def tiled_attention(q, k, v, mask=None, block=16):
    return getattr(attention_workbook.inference, "tiled_attention")(q, k, v, mask, block)
'''}, _TILED, _REF, "tiled_attention fetches the package's with getattr"),
    Shortcut("tamper_encoded_09", A9, "tampering: encoded", {"online_softmax": _tamper("09") + '''

def online_softmax(x, block=4):
    raise NotImplementedError()
'''}, _all_cells(_ONLINE, _TILED, _GQA, _ROPE, _WINDOW, _CACHED), _TAMPER,
        "implements nothing; the check modules imported under base64 names and patched with setattr",
        unanswered=True, in_kernel=False),
    Shortcut("encoded_delegation_09", A9, "tampering: encoded delegation", {"tiled_attention":
        _encoded_import("attention_workbook.inference", "tiled_attention", "_tiles") + '''

def tiled_attention(q, k, v, mask=None, block=16):
    return _tiles(q, k, v, mask, block)
'''}, _all_cells(_TILED, _ONLINE, _GQA), _TAMPER,
        "tiled_attention calls the package's fetched under base64-encoded names", in_kernel=False),
    Shortcut("window_importlib", A9, "delegation: importlib", {"sliding_window_mask": '''import importlib


def sliding_window_mask(T, window):
    return importlib.import_module("attention_workbook.inference").sliding_window_mask(T, window)
'''}, _WINDOW, _REF, "sliding_window_mask calls the package's, its module fetched with importlib"),
    Shortcut("generate_cached_sys_modules", A9, "delegation: importlib", {"generate_cached": '''import sys
import attention_workbook.inference


@torch.no_grad()
def generate_cached(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    return sys.modules["attention_workbook.inference"].generate_cached(model, idx, max_new_tokens, temperature,
                                                                       top_k, generator)
'''}, _CACHED, _REF, "generate_cached calls the package's, its module read from sys.modules"),
    Shortcut("gqa_holds_reference", A9, "delegation: composition", {"GroupedQueryAttention": '''from attention_workbook import inference


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        self.inner = inference.GroupedQueryAttention(d_model, n_heads, n_kv_heads)

    def forward(self, x, mask=None, is_causal=False):
        return self.inner(x, mask, is_causal)
'''}, _GQA, _REF, "GroupedQueryAttention is an nn.Module holding the package's and forwarding to it"),
]


def shortcuts(assignment: str | None = None) -> list[Shortcut]:
    return [s for s in SHORTCUTS if assignment is None or s.assignment == assignment]


COHORT = (A4, A5, A6, A7, A8, A9)


def contract_breaking(assignment: str | None = None) -> list[tuple[str, object]]:
    """(assignment, mistake) for the catalogued contract-breaking mistakes (``visible=True``: right
    on some of the inputs the text promises, wrong on others) of 04-09. ``tests/test_shortcuts.py``
    grades them in the same cohort run as the shortcuts (sandbox on), so ``tests/test_catalog.py``
    leaves them out."""
    from . import mistakes

    return [(a, m) for a in COHORT if assignment in (None, a) for m in mistakes(a) if m.visible]
