"""GEMM efficiency against the problem's shape (gpuwise.validation.gemm_shape): the implied efficiencies and the
leave-one-source-out test of a saturating law in tokens per micro-step, on the measured Hopper rows timed with the
pytorch op_efficiency row (H200 grid and check, IBM 96-H100 FSDP, Lambda 1x/8x H100). The law is NOT adopted: these
tests pin the finding that blocks it, so that a change of the model or the data that lifts it shows up here."""

import numpy as np
import pytest

from gpuwise.validation.gemm_shape import (
    HELD_OUT,
    hopper_cases,
    implied_gemm,
    leave_one_source_out,
    m_law,
    predict,
)


@pytest.fixture(scope="module")
def cases():
    return hopper_cases()


def _one(cases, source, prefix):
    return next(c for c in cases[source] if c.case.startswith(prefix))


def test_implied_gemm_reproduces_the_measured_rate(cases):
    """Consistency check (the model against itself): at the implied constant the model predicts the measurement."""
    for c in (_one(cases, "lambda-fa2", "gpt3-2.7b 1xH100"), _one(cases, "h200-grid", "mpt-1b mb4 seq2048 none")):
        g = implied_gemm(c)
        assert 0.3 < g < 0.95
        assert predict(c, g) == pytest.approx(c.measured, rel=1e-3)


def test_ibm_implies_a_lower_gemm_efficiency_on_larger_shapes_of_the_same_model(cases):
    """The finding that rules out any law monotone in shape: Llama-2-7B, same hidden and FFN widths, IBM's rows have
    twice the tokens per micro-step and twice the sequence, yet imply ~0.6x the H200 grid's GEMM efficiency."""
    ibm = _one(cases, "ibm-fsdp-blog", "llama2-7b 96xH100")
    h200 = [c for c in cases["h200-grid"] if c.case.startswith("llama-2-7b mb2 seq2048")]
    assert len(h200) == 2
    for c in h200:
        assert (ibm.model.hidden, ibm.model.ffn_hidden) == (c.model.hidden, c.model.ffn_hidden)
        assert ibm.tokens_per_micro_step >= 2 * c.tokens_per_micro_step and ibm.cfg.seq_len >= 2 * c.cfg.seq_len
        assert implied_gemm(ibm) < 0.75 * implied_gemm(c)


def test_m_law_is_monotone_and_bounded():
    m = np.array([512, 1024, 4096, 16384, 65536, 1e7])
    e = m_law(m, 0.8, 2000.0)
    assert np.all(np.diff(e) > 0) and np.all(e < 0.8) and e[-1] == pytest.approx(0.8, rel=1e-3)
    assert m_law(2000.0, 0.8, 2000.0) == pytest.approx(0.4)


def test_the_m_law_fits_the_grid_but_not_ibm_out_of_source(cases):
    """Leave-one-source-out: the law predicts the held-out H200 check rows and Lambda but IBM's rows ~+34% fast
    (today's model: IBM 10% in the stored fit) and the H200 grid from IBM + Lambda no better than today."""
    res = leave_one_source_out(cases)
    err = {s: np.exp(e) - 1 for s, (_, e) in res.items()}
    assert np.median(err["ibm-fsdp-blog"]) > 0.25
    # (Lambda's 2.7B steps at the law's faster GEMMs meet the host's dispatch floor: 11% since it was added)
    assert np.median(np.abs(err[HELD_OUT])) < 0.10 and np.median(np.abs(err["lambda-fa2"])) < 0.12
    assert np.median(err["h200-grid"]) < -0.15
