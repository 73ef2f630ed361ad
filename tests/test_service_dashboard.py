"""The dashboard's parts without a server: chart layout (nothing overlaps, units on the axes), the job
page's predicted-vs-actual arithmetic, and short job ids resolved on a real SQLite store. The pages in
a browser: tests/test_service_api.py (headless Chromium)."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from gpuwise.errors import InputError  # noqa: E402
from gpuwise.service import charts  # noqa: E402
from gpuwise.service.job_page import compare  # noqa: E402

GPUS = {"A100-40GB-SXM": 16, "T4": 48, "V100-16GB-SXM2": 32}


def _boxes(fig):
    """Window extents of the legend, the axes, and every tick label and axis label that is drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    ax = fig.axes[0]
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    labels = [t for t in ax.get_xticklabels() if t.get_text() and x0 <= t.get_position()[0] <= x1]
    labels += [t for t in ax.get_yticklabels() if t.get_text() and y0 <= t.get_position()[1] <= y1]
    labels += [ax.xaxis.label, ax.yaxis.label]
    legend = ax.get_legend()
    return (legend.get_window_extent(renderer) if legend else None, ax.get_window_extent(renderer),
            [t.get_window_extent(renderer) for t in labels], fig.bbox)


@pytest.mark.parametrize("make", [
    lambda: charts.usage_figure([{"gpu_type": "A100-40GB-SXM", "at_sim": 40.0, "used": 16},
                                 {"gpu_type": "V100-16GB-SXM2", "at_sim": 7000.0, "used": 24}], GPUS, 9000.0),
    lambda: charts.progress_figure([(100.0, 0.0), (400.0, 0.3)], (100.0, 1200.0), (400.0, 0.3, 1300.0)),
    lambda: charts.loss_figure([(i, 4.1 / (1 + 0.1 * i)) for i in range(30)]),
])
def test_chart_legend_ticks_and_labels_do_not_overlap(make):
    legend, axes, texts, page = _boxes(make())
    for i, a in enumerate(texts):
        assert page.x0 - 1 <= a.x0 and a.x1 <= page.x1 + 1 and page.y0 - 1 <= a.y0 and a.y1 <= page.y1 + 1
        for b in texts[i + 1:]:
            assert not a.overlaps(b), (a, b)
    if legend is not None:                    # beside the plot: over no data, no tick, no label
        assert not legend.overlaps(axes) and legend.x1 <= page.x1 + 1
        assert not any(legend.overlaps(t) for t in texts)


def test_time_axes_say_their_unit_and_short_runs_read_in_seconds():
    assert charts.time_unit(90) == (1.0, "s") and charts.time_unit(1800)[1] == "min"
    assert charts.time_unit(20 * 3600)[1] == "h"
    short = charts.usage_figure([{"gpu_type": "T4", "at_sim": 5.0, "used": 4}], {"T4": 48}, 60.0)
    assert short.axes[0].get_xlabel() == "backend clock (s)" and short.axes[0].get_xlim() == (0.0, 60.0)
    jct = charts.jct_figure([7200.0, 30000.0])
    assert jct.axes[0].get_xlabel() == "job completion time (h)" and jct.axes[0].get_xlim()[0] == 0
    svg = charts.svg(charts.loss_figure([(0, 4.0), (1, 3.0)]), "loss")
    assert svg.startswith('<div id="loss" class="chart"><svg') and '<g id="loss-curve"' in svg


PRED = {"chosen": {"gpu": "T4", "gpus": 4, "time_hours": 1.0, "cost_usd": 2.0},
        "options": [{"gpu": "T4", "usd_per_gpu_hour": 0.5}, {"gpu": "V100-16GB-SXM2", "usd_per_gpu_hour": 2.0}]}


def _row(**kw):
    row = {"state": "running", "prediction": PRED, "allocation": {"gpu_type": "T4", "gpus": 4},
           "started_sim": 100.0, "finished_sim": None, "progress": 0.25, "measured_speed": 1 / 3600,
           "attained_gpu_s": 4 * 900.0}
    return {**row, **kw}


def test_predicted_vs_actual_for_a_running_and_a_finished_job():
    run = compare(_row(), [], clock_s=1000.0)
    assert run["projected"] and run["eta"] == pytest.approx(1000.0 + 0.75 * 3600)
    assert run["finish_pred"] == 3700.0 and run["run_act"] == pytest.approx(900.0 + 0.75 * 3600)
    # 1 GPU-hour so far + 4 GPUs for the 0.75 h left, at 0.50 USD per GPU-hour
    assert run["cost_act"] == pytest.approx(0.5 * (1.0 + 4 * 0.75)) and run["cost_pred"] == 2.0
    events = [{"kind": "allocated", "detail": {"gpu_type": "V100-16GB-SXM2", "gpus": 2}}]
    done = compare(_row(state="done", allocation=None, finished_sim=2100.0, progress=1.0,
                        attained_gpu_s=2 * 2000.0), events, clock_s=5000.0)
    assert not done["projected"] and done["run_act"] == 2000.0 and done["finish_act"] == 2100.0
    assert done["gpus_act"] == "2 x V100-16GB-SXM2" and done["cost_act"] == pytest.approx(2.0 * 4000 / 3600)
    queued = compare(_row(state="queued", allocation=None, started_sim=None, measured_speed=None), [], 10.0)
    assert queued["finish_pred"] is None and queued["finish_act"] is None and queued["cost_act"] is None


def test_short_ids_resolve_on_a_real_store(tmp_path):
    pytest.importorskip("sqlalchemy")
    from gpuwise.jobqueue.store import Store
    from gpuwise.service.web import matching_ids

    store = Store(f"sqlite:///{tmp_path / 'service.db'}")
    alice, _ = store.create_token("alice")
    bob, _ = store.create_token("bob")
    fields = {"name": "j", "spec": {}, "spec_key": "k", "prediction": {}, "max_gpus": 1, "request_gpus": 1}
    ids = {u.name: [store.insert_job(u, fields, None)[0]["id"] for _ in range(20)] for u in (alice, bob)}
    one = ids["alice"][0]
    assert matching_ids(store, one[:12].upper(), alice.id) == [one]
    assert matching_ids(store, one[:12], bob.id) == []                      # not bob's: not found
    first = one[0]
    mine = [i for i in ids["alice"] if i.startswith(first)]
    assert matching_ids(store, first, alice.id) == sorted(mine)[:10]
    everyone = [i for i in ids["alice"] + ids["bob"] if i.startswith(first)]   # an admin's view
    assert matching_ids(store, first, None, limit=100) == sorted(everyone)
    with pytest.raises(InputError) as bad:
        matching_ids(store, "xyz", alice.id)
    assert bad.value.field == "prefix"
    store.close()
