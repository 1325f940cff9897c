"""One training step of the Mixtral model (flytune.models.train) with flytune's MoE layer against the same step
with jax.lax.ragged_dot's, on the CPU emulator: a two-layer model whose MoE problem is the training export's
(conftest's emu_train_export_dir: E 4, H 64, I 64, top-2, forward and backward buckets at T = 1, 9), one batch of
2 x 4 tokens (8 tokens reach each MoE layer: the bucket 9), the same bf16 parameters for both.

Checked: the losses agree (LOSS_BOUND), every parameter's gradient agrees (GRAD_BOUND, relative L2), a second
step lowers the loss of both; a mutant flytune backward (its dw1 and dx 5% too large, as a broken kernel would
give) must fail the gradient comparison, on w1 and on the parameters before the MoE layer.

The bounds, from a run of this test's model and batch (2026-12-07, CPU emulator, gfx950 export):
- flytune's forward matched ragged_dot's bit for bit here (loss difference 0; both accumulate the layer in
  float32 and round its output to bf16 once). The loss of the bf16 model differs from the same model in float32
  by 1.1e-4 relative (5.9e-4 of 5.51), so LOSS_BOUND = 1e-3 relative leaves room for a kernel that sums in
  another order (a GPU's) and fails a layer that is wrong by more than bf16 rounding.
- Gradients: flytune's backward keeps its accumulators in float32 and rounds dx, dw1, dw2 to bf16; ragged_dot's
  transpose rounds its own way. Per parameter the two differed by at most 7.8e-3 relative L2 (layer 0's
  moe_norm; w1 5.7e-3, w2 5.4e-3), the bf16 ragged_dot model differs from the float32 one by up to 1.1e-2 and
  the dense bf16 layer from ragged_dot by up to 6.4e-3. GRAD_BOUND = 2e-2 is the layer tests' bf16 bound
  (layer_reference.TOLERANCE); a gradient 5% off (the mutant) misses it.
"""
import numpy as np
import pytest

from conftest import framework, train_model_config
from layer_reference import rel_l2

jax = framework("jax")
import jax.numpy as jnp  # noqa: E402

import flytune  # noqa: E402
import flytune.jax as fj  # noqa: E402
from flytune.models import mixtral, train  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::flytune.CoverageWarning")

CONFIG = train_model_config()
LOSS_BOUND = 1e-3   # relative difference of the two losses
GRAD_BOUND = 2e-2   # relative L2 of each parameter's gradient, flytune against ragged_dot
LR = 0.1


@pytest.fixture(scope="module")
def emu_train(emu_train_model_export):
    return emu_train_model_export


@pytest.fixture(scope="module")
def batch():
    seq = jnp.asarray(np.random.default_rng(0).integers(0, CONFIG.vocab, (2, 5)), jnp.int32)
    return seq[:, :-1], seq[:, 1:]  # tokens, next tokens: B 2 x T 4 = 8 tokens per MoE layer


@pytest.fixture(scope="module")
def params():
    return mixtral.random_params(CONFIG, seed=3)


@pytest.fixture(scope="module")
def ragged_step(params, batch):
    """ragged_dot's step: (loss, gradients, the second step's loss)."""
    return _two_steps(train.make_train_step(CONFIG, "ragged_dot", with_grads=True), params, batch)


def _two_steps(step, params, batch):
    new, loss, grads = step(params, *batch, LR)
    _, loss2, _ = step(new, *batch, LR)
    assert jax.tree.all(jax.tree.map(lambda p, g: p.dtype == g.dtype == jnp.bfloat16, params, grads))
    return float(loss), grads, float(loss2), new


def _grad_errors(got, want) -> dict:
    """Relative L2 of each parameter's gradient, named 'layer0.w1', 'embed', ..."""
    flat_got, flat_want = jax.tree_util.tree_flatten_with_path(got)[0], jax.tree_util.tree_flatten_with_path(want)[0]
    errors = {}
    for (path, g), (path2, w) in zip(flat_got, flat_want):
        assert path == path2
        name = jax.tree_util.keystr(path).replace("['layers'][", "layer").replace("]['", ".").strip("[]'")
        errors[name] = rel_l2(np.asarray(g, np.float32), np.asarray(w, np.float32))
    return errors


def test_one_training_step_with_flytune_matches_ragged_dot(emu_train, params, batch, ragged_step):
    loss, grads, loss2, new = _two_steps(train.make_train_step(CONFIG, "flytune", emu_train, with_grads=True),
                                         params, batch)
    r_loss, r_grads, r_loss2, _ = ragged_step
    print(f"loss flytune {loss:.6f} ragged_dot {r_loss:.6f}; after a step {loss2:.6f} / {r_loss2:.6f}")
    assert abs(loss - r_loss) <= LOSS_BOUND * abs(r_loss), (loss, r_loss)
    errors = _grad_errors(grads, r_grads)
    print("gradients' relative L2:", {k: f"{v:.1e}" for k, v in errors.items()})
    assert all(v < GRAD_BOUND for v in errors.values()), errors
    assert {"layer0.w1", "layer0.w2", "layer1.w1", "layer1.w2", "layer0.router", "layer0.wq", "embed"} <= set(errors)
    # the step: SGD of those gradients; a second step on the same batch lowers the loss
    assert jnp.array_equal(new["layers"][1]["w2"], train.sgd(params, grads, LR)["layers"][1]["w2"])
    assert np.isfinite(loss2) and loss2 < loss and r_loss2 < r_loss
    assert abs(loss2 - r_loss2) <= 10 * LOSS_BOUND * abs(r_loss2), (loss2, r_loss2)  # after diverging updates


def test_a_wrong_flytune_backward_fails_the_comparison(emu_train, params, batch, ragged_step, monkeypatch):
    # The mutant: flytune's backward with dw1 and dx 5% too large (its forward unchanged).
    launch = fj._launch_backward

    def mutant(*args):
        dx, dw1, dw2, dtw = launch(*args)
        return dx * 1.05, dw1 * 1.05, dw2, dtw
    monkeypatch.setattr(fj, "_launch_backward", mutant)
    loss, grads, _, _ = _two_steps(train.make_train_step(CONFIG, "flytune", emu_train, with_grads=True), params, batch)
    assert abs(loss - ragged_step[0]) <= LOSS_BOUND * abs(ragged_step[0])
    errors = _grad_errors(grads, ragged_step[1])
    failing = {k for k, v in errors.items() if v >= GRAD_BOUND}
    assert {"layer0.w1", "layer1.w1", "layer0.moe_norm", "layer0.wo", "embed"} <= failing, errors
    assert errors["layer1.w2"] < GRAD_BOUND  # unchanged where the mutant did not touch
