"""One training step of the PyTorch Mixtral model (flytune.models.torch_train) with flytune's MoE layer (the op
flytune::moe_layer and its autograd) against the same step with torch._grouped_mm's layer (its autograd; the
per-expert loop's where this torch lacks it), on the CPU emulator: the JAX test's model and export
(test_train_model.py: two layers, E 4, H 64, I 64, top-2, bf16; 2 x 4 tokens, 8 per MoE layer), the same bf16
parameters for both. A mutant backward op (dw1 and dx 5% too large) must fail the gradient comparison.

The bounds are wider than the JAX test's, from runs of this model at seeds 0-5 (2026-12-07, CPU emulator):
torch's grouped_mm layer rounds each (token, slot) pair's output to bf16 before the routed weights sum them,
where flytune's layer sums in float32 and rounds once, so here the forwards differ too -- the losses by
1.1e-4 to 6.3e-4 relative (LOSS_BOUND 2e-3) -- and the gradients by up to 1.5e-2 relative L2 (layer 1's router
at this test's seed); the bf16 grouped_mm model is itself up to 1.8e-2 from the float32 one. GRAD_BOUND 3e-2.
"""
import numpy as np
import pytest

from conftest import framework, train_model_config

torch = framework("torch")
import flytune  # noqa: E402
import flytune.torch  # noqa: E402,F401  (registers the ops)
from flytune.models import torch_mixtral as tm, torch_train as tt  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::flytune.CoverageWarning")

CONFIG = train_model_config()
LOSS_BOUND = 2e-3   # relative difference of the two losses
GRAD_BOUND = 3e-2   # relative L2 of each parameter's gradient, flytune against grouped_mm
LR = 0.1
SEED = 3


@pytest.fixture(scope="module")
def emu_train(emu_train_model_export):
    return emu_train_model_export


@pytest.fixture(scope="module")
def batch():
    seq = torch.from_numpy(np.random.default_rng(0).integers(0, CONFIG.vocab, (2, 5)))
    return seq[:, :-1], seq[:, 1:]


def _params():
    return tm.random_params(CONFIG, SEED, "cpu", torch.bfloat16)


def _two_steps(impl, batch, export=None):
    """(loss, gradients, the second step's loss, the params before and after the first step)."""
    params = _params()
    before = tt._like(params, [t.clone() for t in tt._leaves(params)])
    loss, grads = tt.train_step(CONFIG, impl, params, *batch, LR, export)
    after = tt._like(params, [t.clone() for t in tt._leaves(params)])
    loss2, _ = tt.train_step(CONFIG, impl, params, *batch, LR, export)
    assert all(g.dtype == torch.bfloat16 for g in tt._leaves(grads))
    return float(loss), grads, float(loss2), before, after


def _names(params) -> list:
    names = [f"layer{i}.{k}" for i, layer in enumerate(params["layers"]) for k in sorted(layer)]
    return ["embed", "final_norm"] + names + ["lm_head"]  # tt._leaves' order: sorted keys, "layers" among them


@pytest.fixture(scope="module")
def grouped_step(batch):
    return _two_steps("grouped_mm", batch)


def _grad_errors(got, want) -> dict:
    rel = lambda a, b: float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))  # noqa: E731
    return {n: rel(g, w) for n, g, w in zip(_names(want), tt._leaves(got), tt._leaves(want))}


def test_one_torch_training_step_with_flytune_matches_grouped_mm(emu_train, batch, grouped_step):
    loss, grads, loss2, before, after = _two_steps("flytune", batch, emu_train)
    r_loss, r_grads, r_loss2, _, _ = grouped_step
    print(f"loss flytune {loss:.6f} grouped_mm {r_loss:.6f}; after a step {loss2:.6f} / {r_loss2:.6f}")
    assert abs(loss - r_loss) <= LOSS_BOUND * abs(r_loss), (loss, r_loss)
    errors = _grad_errors(grads, r_grads)
    print("gradients' relative L2:", {k: f"{v:.1e}" for k, v in errors.items()})
    assert all(v < GRAD_BOUND for v in errors.values()), errors
    # the step: SGD of those gradients, in place; a second step on the same batch lowers the loss
    w2, g2 = before["layers"][1]["w2"], grads["layers"][1]["w2"]
    assert torch.equal(after["layers"][1]["w2"], (w2.float() - LR * g2.float()).bfloat16())
    assert np.isfinite(loss2) and loss2 < loss and r_loss2 < r_loss
    assert abs(loss2 - r_loss2) <= 10 * LOSS_BOUND * abs(r_loss2), (loss2, r_loss2)


def test_a_wrong_flytune_backward_op_fails_the_comparison(emu_train, batch, grouped_step, monkeypatch):
    backward = torch.ops.flytune.moe_layer_backward

    def mutant(*args):
        dx, dw1, dw2, dtw = backward(*args)
        return dx * 1.05, dw1 * 1.05, dw2, dtw
    monkeypatch.setattr(torch.ops.flytune, "moe_layer_backward", mutant)
    loss, grads, _, _, _ = _two_steps("flytune", batch, emu_train)
    errors = _grad_errors(grads, grouped_step[1])
    failing = {k for k, v in errors.items() if v >= GRAD_BOUND}
    print("mutant:", {k: f"{v:.1e}" for k, v in errors.items()})
    assert {"layer0.w1", "layer1.w1", "layer0.moe_norm"} <= failing, errors
    assert errors["layer1.w2"] < GRAD_BOUND  # unchanged where the mutant did not touch
