"""The shared objective: advantages, collation, padding invariance, GRPO loss."""

import numpy as np
import pytest
import torch

from bt_core.config import ModelConfig
from bt_core.training.model import build_model
from bt_core.training.objective import advantages, collate, grpo_loss, rollout_logprob


def test_advantages_reference_formula():
    a = advantages(
        np.array([8, 0, 0, 0, 1, 1, 1, 1], np.float32), np.array([0, 0, 0, 0, 1, 1, 1, 1])
    )
    assert np.allclose(a[:4], [1.5, -0.5, -0.5, -0.5], atol=1e-5)  # unbiased std = 4
    assert np.all(a[4:] == 0)  # equal rewards → no gradient
    d = advantages(np.array([8, 0, 0, 0], np.float32), np.zeros(4, int), std_norm=False)
    assert np.allclose(d, [6, -2, -2, -2])


def _rows():
    prompts = np.array([[1, 5, 6, 4, 0], [1, 7, 4, 0, 0], [1, 5, 6, 7, 4]], np.int32)
    plen = np.array([4, 3, 5], np.int32)
    replies = np.array([[9, 10, 2, 0], [11, 2, 0, 0], [9, 9, 9, 9]], np.int32)
    rlen = np.array([3, 2, 4], np.int32)
    return prompts, plen, replies, rlen


def test_collate_layout_and_mask():
    b = collate(*_rows(), pad_id=0, eos_id=2)
    assert b.reply_start == 5
    assert b.input_ids[1].tolist() == [0, 0, 1, 7, 4, 11, 2, 0, 0]
    assert b.attention_mask[1].tolist() == [0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert b.loss_mask[1].tolist() == [0, 0, 0, 0, 0, 1, 0, 0, 0]  # EOS and padding excluded
    assert b.position_ids[1, 2:7].tolist() == [0, 1, 2, 3, 4]


def test_rollout_logprob_is_padding_invariant():
    model = build_model(ModelConfig(hidden_size=16, num_heads=2, intermediate_size=32), 12, seed=0)
    rows = _rows()
    full = rollout_logprob(model, collate(*rows, pad_id=0, eos_id=2))
    for i in range(3):
        one = rollout_logprob(model, collate(*(r[i : i + 1] for r in rows), pad_id=0, eos_id=2))
        assert one.item() == pytest.approx(full[i].item(), abs=1e-5)


def test_grpo_loss_is_minus_mean_over_groups():
    model = build_model(ModelConfig(hidden_size=16, num_heads=2, intermediate_size=32), 12, seed=0)
    batch = collate(*_rows(), pad_id=0, eos_id=2)
    adv = torch.tensor([1.0, -1.0, 0.5])
    group = np.array([0, 0, 1])
    ell = rollout_logprob(model, batch)
    expected = -0.5 * ((adv[0] * ell[0] + adv[1] * ell[1]) / 2 + adv[2] * ell[2])
    assert grpo_loss(model, batch, adv, group).item() == pytest.approx(expected.item(), rel=1e-6)
