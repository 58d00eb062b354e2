"""The tuner's judgement on constructed points: stability, the recommendation (never from an
unstable point), goals and objectives, the batch model, memory and the budget plan."""

from __future__ import annotations

import pytest

from tests.tuning.tuning_points import point, setting, step
from workbench.perf import LoadLevel
from workbench.tuning.batch_model import fit
from workbench.tuning.budget import ModelOption, plan_budget
from workbench.tuning.decide import decide
from workbench.tuning.goals import Goals
from workbench.tuning.memory import estimate
from workbench.tuning.points import meets, score, stability
from workbench.tuning.space import Setting
from workbench.tuning.strategies import ceiling

SERVED = setting(instance_count=1)
TWO = setting(instance_count=2)


def test_three_windows_within_the_tolerance_are_stable_two_are_not() -> None:
    assert stability([step(100, 5), step(104, 5), step(97, 5)], 99, 10)[0]
    assert not stability([step(100, 5), step(104, 5)], 99, 10)[0]
    assert not stability([step(100, 5), step(130, 5), step(100, 5)], 99, 10)[0]
    assert not stability([step(100, 5), step(100, 9), step(100, 5)], 99, 10)[0]  # latency too


def test_an_all_unstable_run_recommends_nothing_and_says_what_to_do() -> None:
    points = [point(SERVED, [100, 150, 90], 5), point(TWO, [300, 180, 250], 5)]
    decision = decide(points, SERVED, Goals(sla_ms=10), {}, 10)
    assert decision.chosen is None and not decision.apply
    assert "every measurement was unstable" in decision.why
    assert "longer windows" in decision.why and "quieter machine" in decision.why


def test_an_unstable_winner_is_passed_over_and_named() -> None:
    points = [point(SERVED, [100, 101, 99], 5), point(TWO, [200, 202, 198], 5, level=2),
              point(TWO, [400, 250, 500], 5, level=4)]
    decision = decide(points, SERVED, Goals(sla_ms=10), {}, 10)
    assert decision.chosen is not None and decision.chosen.level.value == 2 and decision.apply
    assert "not trusted" in decision.why


def test_a_gain_within_the_tolerance_keeps_the_served_config() -> None:
    points = [point(SERVED, [100, 101, 99], 5), point(TWO, [105, 106, 104], 5)]
    decision = decide(points, SERVED, Goals(sla_ms=10), {}, 10)
    assert decision.chosen is not None and decision.chosen.setting == TWO
    assert not decision.apply and "keeping the served config" in decision.why


def test_a_gain_over_an_unstable_served_figure_is_not_proven() -> None:
    points = [point(SERVED, [100, 101, 99], 5), point(SERVED, [150, 220, 190], 5, level=2),
              point(TWO, [200, 202, 198], 5)]
    decision = decide(points, SERVED, Goals(sla_ms=10), {}, 10)
    assert not decision.apply and "not proven" in decision.why


def test_the_sla_and_failed_requests_rule_points_out() -> None:
    goals = Goals(sla_ms=4)
    slow = point(TWO, [500, 500, 500], 6)
    failing = point(TWO, [500, 500, 500], 2, errors=1)
    assert meets(slow, goals)[0].startswith("p99 6.00 ms > SLA 4 ms")
    assert "failed request" in meets(failing, goals)[0]
    decision = decide([point(SERVED, [100, 100, 100], 3), slow, failing], SERVED, goals, {}, 10)
    assert decision.chosen is not None and decision.chosen.setting == SERVED and not decision.apply


def test_objectives_rank_differently() -> None:
    fast = point(TWO, [400, 400, 400], 8)
    quick = point(SERVED, [300, 300, 300], 2)
    assert score(fast, Goals()) > score(quick, Goals())
    assert score(quick, Goals(objective="latency")) > score(fast, Goals(objective="latency"))
    per_instance = Goals(objective="throughput_per_instance")
    assert score(quick, per_instance) > score(fast, per_instance)
    good = point(TWO, [400, 400, 400], 8, within=100)
    assert score(good, Goals(sla_ms=5, objective="goodput")) == pytest.approx(100)


def test_a_memory_budget_rules_out_a_setting() -> None:
    goals = Goals(host_memory_mb=100)
    big = point(TWO, [400, 400, 400], 2)
    assert meets(big, goals, 150) == ["memory 150 MiB > budget 100 MiB"]
    decision = decide([point(SERVED, [100, 100, 100], 2), big], SERVED, goals, {TWO.label: 150.0}, 10)
    assert decision.chosen is not None and decision.chosen.setting == SERVED


def test_the_batch_model_fits_a_line_through_the_server_statistics() -> None:
    points = [point(setting(max_batch_size=b), [1000, 1000, 1000], 2, batch=b, compute_us=20 * b + 100)
              for b in (1, 4, 8)]
    model = fit(points)
    assert model is not None
    assert model.per_item_us == pytest.approx(20, abs=1) and model.fixed_us == pytest.approx(100, abs=5)
    assert model.capacity(8) == pytest.approx(8 / 260 * 1e6, rel=0.05)
    assert fit(points[:1]) is None


def count(setting_: Setting) -> int:
    return int(setting_.get("instance_count", 1))  # type: ignore[call-overload]


def test_memory_per_instance_is_the_slope_over_instance_counts() -> None:
    readings = {"instance_count=1": 500.0, "instance_count=2": 550.0, "instance_count=4": 650.0}
    settings = [setting(instance_count=c) for c in (1, 2, 4)]
    found = estimate(readings, settings, 480.0, count)
    assert found is not None
    assert found.per_instance_mb == pytest.approx(50) and found.base_mb == pytest.approx(450)
    assert "least-squares" in found.method
    one = estimate({"instance_count=1": 530.0}, settings[:1], 480.0, count)
    assert one is not None and one.per_instance_mb == pytest.approx(50) and "upper bound" in one.method


def option(model: str, instances: int, per_mb: float, relative: float) -> ModelOption:
    return ModelOption(model, f"instance_count={instances}", instances, per_mb * instances, per_mb,
                       relative * 100, relative, "concurrency 4")


def test_the_budget_plan_is_the_best_combination_that_fits() -> None:
    a = [option("a", 1, 2100, 1.0), option("a", 4, 2100, 2.5)]
    b = [option("b", 1, 4800, 1.0), option("b", 2, 4800, 1.6)]
    c = [option("c", 1, 1500, 1.0), option("c", 6, 1500, 2.0)]
    plan = plan_budget([a, b, c], 27_000)
    assert [o.instances for o in plan.chosen] == [4, 2, 6]
    assert plan.arithmetic() == "a 2,100.0 MiB × 4 + b 4,800.0 MiB × 2 + c 1,500.0 MiB × 6 = 27,000.0 MiB of 27,000 MiB"
    tight = plan_budget([a, b, c], 20_000)
    assert tight.total_mb == 19_500 and [o.instances for o in tight.chosen] == [4, 2, 1]  # 5.1 beats 4+1+1 (4.5)
    assert "infeasible" in plan_budget([a, b, c], 5_000).why


def test_the_early_stopping_ceiling_is_little_s_law_at_the_top_of_the_axis() -> None:
    levels = [LoadLevel.concurrency(c) for c in (1, 4, 16)]
    here = point(TWO, [6000, 6000, 6000], 2, level=4)  # mean latency 1 ms (half the p99)
    assert ceiling(here, levels, Goals(sla_ms=5)) == pytest.approx(16 / 0.001)
    assert ceiling(here, levels, Goals(objective="throughput_per_instance")) == pytest.approx(16 / 0.001 / 2)
    assert ceiling(here, levels, Goals(objective="latency")) == score(here, Goals(objective="latency"))


def test_a_served_config_with_only_unstable_points_still_needs_beating() -> None:
    """New-user trial: every served-config point unstable (12.6k infer/s, spread 117 %), one
    stable candidate at 9.0k: the candidate was recommended and applied ("the served config
    has no stable point"); a gain that noise could explain is not proven either way."""
    served_fast = point(SERVED, [12_600, 4_000, 21_000], 2, level=8)
    candidate = point(TWO, [9_000, 9_100, 8_900], 3, level=8)
    decision = decide([served_fast, candidate], SERVED, Goals(sla_ms=10), {}, 10)
    assert decision.chosen is candidate and not decision.apply
    assert "the gain is not proven" in decision.why
    # a candidate beating even the served config's untrusted figure is still recommended
    clear = point(TWO, [20_000, 20_100, 19_900], 3, level=8)
    served_slow = point(SERVED, [9_000, 3_000, 14_000], 2, level=8)
    decision = decide([served_slow, clear], SERVED, Goals(sla_ms=10), {}, 10)
    assert decision.apply and "beaten beyond the 10 % tolerance" in decision.why
