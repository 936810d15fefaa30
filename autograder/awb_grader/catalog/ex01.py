"""Misconception catalog for exercise 01 (rnn_forward, gradient_vs_distance)."""

from . import Alternative, Mistake, edit

A = "01_rnn_limitations"

_RNN_VALUES = ("test_rnn_forward_values", "test_rnn_forward_h0")
_GRAD_VALUES = ("test_gradient_vs_distance_single", "test_gradient_vs_distance_batch")


MISTAKES = [
    # -- rnn_forward -----------------------------------------------------------------------
    Mistake(
        id="rnn_W_hh_transposed", cell="rnn_forward",
        description="h @ W_hh.T: the recurrent matrix used the other way round",
        source=edit(A, "rnn_forward", ("W_hh ", "W_hh.T ")),
        must_fail=_RNN_VALUES, hint="W_hh.T"),
    Mistake(
        id="rnn_no_tanh", cell="rnn_forward",
        description="no nonlinearity: a linear recurrence",
        source=edit(A, "rnn_forward", ("torch.tanh(x[:, t] @ W_xh + h @ W_hh + b)", "x[:, t] @ W_xh + h @ W_hh + b")),
        must_fail=_RNN_VALUES, hint="no tanh"),
    Mistake(
        id="rnn_relu", cell="rnn_forward",
        description="relu instead of tanh",
        source=edit(A, "rnn_forward", (".tanh(", ".relu(")),
        must_fail=_RNN_VALUES, hint="relu"),
    Mistake(
        id="rnn_tanh_misplaced", cell="rnn_forward",
        description="tanh around the input term only",
        source=edit(A, "rnn_forward", ("W_xh + h @ W_hh + b)", "W_xh) + h @ W_hh + b")),
        must_fail=_RNN_VALUES, hint="tanh applied to x_t W_xh only"),
    Mistake(
        id="rnn_off_by_one", cell="rnn_forward",
        description="appends h before updating it: returns h0 .. h_{T-1}",
        source=edit(A, "rnn_forward", ("]):\n"
                                       "        h =",
                                       "]):\n"
                                       "        states.append(h)\n"
                                       "        h ="),
                                      (")\n"
                                       "        states.append(h)\n"
                                       "    return",
                                       ")\n"
                                       "    return")),
        must_fail=_RNN_VALUES, hint="shifted by one"),
    Mistake(
        id="rnn_ignores_h0", cell="rnn_forward",
        description="starts from a zero state instead of h0",
        source=edit(A, "rnn_forward", ("h = h0", "h = torch.zeros_like(h0)")),
        must_fail=("test_rnn_forward_h0",), hint="ignores h0"),
    Mistake(
        id="rnn_last_state_only", cell="rnn_forward",
        description="returns only the final hidden state (B, H)",
        source=edit(A, "rnn_forward", ("return torch.stack(states, dim=1)", "return h")),
        must_fail=("test_rnn_forward_shape",) + _RNN_VALUES, hint="only the last state"),
    Mistake(
        id="rnn_time_major", cell="rnn_forward",
        description="indexes x[t] (time-major) instead of x[:, t]",
        source=edit(A, "rnn_forward", ("[1]", "[0]"), (":, ", "")),
        must_fail=("test_rnn_forward_shape",) + _RNN_VALUES, hint="x[:, t]"),
    # -- gradient_vs_distance -------------------------------------------------------------
    Mistake(
        id="grad_time_order", cell="gradient_vs_distance",
        description="norms in time order, not by distance (no flip)",
        source=edit(A, "gradient_vs_distance", (".flip(0)", "")),
        must_fail=_GRAD_VALUES, hint="flip"),
    Mistake(
        id="grad_all_states", cell="gradient_vs_distance",
        description="differentiates the sum of all hidden states instead of the last one",
        source=edit(A, "gradient_vs_distance", ("hs[:, -1].sum()", "hs.sum()")),
        must_fail=_GRAD_VALUES, hint="all hidden states"),
    Mistake(
        id="grad_squared_norm", cell="gradient_vs_distance",
        description="returns squared norms (no square root)",
        source=edit(A, "gradient_vs_distance", ("grad.norm(dim=(0, 2))", "(grad ** 2).sum(dim=(0, 2))")),
        must_fail=_GRAD_VALUES, hint="squared"),
    Mistake(
        id="grad_of_norm", cell="gradient_vs_distance",
        description="differentiates the norm of the last state instead of its sum",
        source=edit(A, "gradient_vs_distance", ("hs[:, -1].sum()", "hs[:, -1].norm()")),
        must_fail=_GRAD_VALUES, hint="norm of the last state"),
    Mistake(
        id="grad_mean_over_batch", cell="gradient_vs_distance",
        description="averages per-sequence norms over the batch",
        source=edit(A, "gradient_vs_distance", ("grad.norm(dim=(0, 2))", "grad.norm(dim=2).mean(dim=0)")),
        must_fail=("test_gradient_vs_distance_batch",), hint="averaged over the batch"),
    Mistake(
        id="grad_one_number", cell="gradient_vs_distance",
        description="one norm over everything: a scalar instead of one per distance",
        source=edit(A, "gradient_vs_distance", ("grad.norm(dim=(0, 2)).flip(0)", "grad.norm()")),
        must_fail=("test_gradient_vs_distance_shape",) + _GRAD_VALUES, hint="single number"),
    Mistake(
        id="grad_ignores_forward", cell="gradient_vs_distance",
        description="calls rnn_forward directly instead of the `forward` argument",
        source=edit(A, "gradient_vs_distance", ("hs = forward(", "hs = rnn_forward(")),
        must_fail=("test_gradient_vs_distance_shape",), hint="never called the `forward`"),
    Mistake(
        id="grad_modifies_x", cell="gradient_vs_distance",
        description="sets requires_grad on the caller's x and leaves .grad behind",
        source='''def gradient_vs_distance(x, h0, W_xh, W_hh, b, forward=rnn_forward):
    x.requires_grad_(True)
    hs = forward(x, h0, W_xh, W_hh, b)
    hs[:, -1].sum().backward()
    return x.grad.norm(dim=(0, 2)).flip(0)
''',
        must_fail=("test_gradient_vs_distance_shape",), hint="changed the caller's x"),
    # -- contract only: right for some of the inputs the text promises, visibly wrong on the others
    Mistake(
        id="rnn_one_sequence", cell="rnn_forward",
        description="runs the first sequence of the batch only: right for B = 1",
        source=edit(A, "rnn_forward", ("h = h0 ", "h = h0[0] "), ("x[:, t] @ W_xh", "x[0, t] @ W_xh"),
                    ("return torch.stack(states, dim=1)", "return torch.stack(states)[None]")),
        must_fail=("test_rnn_forward_shape", "test_rnn_forward_values", "test_rnn_forward_h0"),
        hint="every sequence", visible=True),
    Mistake(
        id="grad_float32_copy", cell="gradient_vs_distance",
        description="converts the copy of x to float32: right for float32 inputs, fails on the float64 ones",
        source=edit(A, "gradient_vs_distance", ("x.detach().clone().requires_grad_(True)",
                                                "x.detach().clone().float().requires_grad_(True)")),
        must_fail=("test_gradient_vs_distance_shape", "test_gradient_vs_distance_single",
                   "test_gradient_vs_distance_batch"), hint="keep x's dtype", visible=True),
]

ALTERNATIVES = [
    Alternative(
        id="preallocated_and_backward",
        description="preallocated output tensor, einsum steps; backward() and x.grad, vector_norm",
        cells={
            "rnn_forward": '''def rnn_forward(x, h0, W_xh, W_hh, b):
    B, T, _ = x.shape
    out = x.new_zeros(B, T, h0.shape[1])
    h = h0
    for t in range(T):
        h = torch.tanh(torch.einsum("bd,dh->bh", x[:, t], W_xh) + torch.einsum("bk,kh->bh", h, W_hh) + b)
        out[:, t] = h
    return out
''',
            "gradient_vs_distance": '''def gradient_vs_distance(x, h0, W_xh, W_hh, b, forward=rnn_forward):
    xg = x.clone().detach()
    xg.requires_grad = True
    hs = forward(xg, h0, W_xh, W_hh, b)
    hs[:, -1, :].sum().backward()
    norms = torch.linalg.vector_norm(xg.grad, dim=(0, 2))
    return torch.flip(norms, dims=[0]).detach()
''',
        }),
    Alternative(
        id="precomputed_inputs_and_loop_norms",
        description="input projections precomputed for all steps; norms by an explicit loop over distance",
        cells={
            "rnn_forward": '''def rnn_forward(x, h0, W_xh, W_hh, b):
    xw = x @ W_xh + b                      # (B, T, H): the part that does not depend on h
    h, states = h0, []
    for t in range(x.size(1)):
        h = (xw[:, t] + h @ W_hh).tanh()
        states.append(h.unsqueeze(1))
    return torch.cat(states, dim=1)
''',
            "gradient_vs_distance": '''def gradient_vs_distance(x, h0, W_xh, W_hh, b, forward=rnn_forward):
    x = x.detach().requires_grad_()
    last = forward(x, h0, W_xh, W_hh, b)[:, -1]
    g = torch.autograd.grad(last.sum(), x)[0]
    T = x.shape[1]
    return torch.stack([g[:, T - 1 - k].pow(2).sum().sqrt() for k in range(T)])
''',
        }),
    Alternative(
        id="warnings_tensor_copy",
        description="copies x with torch.tensor(x, requires_grad=True) (torch warns to use clone): correct, so "
                    "full marks, warnings or not",
        cells={"gradient_vs_distance": edit(A, "gradient_vs_distance", ("x.detach().clone().requires_grad_(True)",
                                                                         "torch.tensor(x, requires_grad=True)"))}),
]
