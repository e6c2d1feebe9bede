"""The nightly gate's power, measured (#39): how often it cries wolf on nights without a change,
and how many nights it takes to see a step, at the noise this machine's RabbitMQ runs measure
and at synthetic noise.

1. Noise: real runs through RabbitMQ on 127.0.0.1:5672 on long-lived local daemons, one after
   another as nights are: unbounded runs for the receive rate, fixed-rate runs (1,000 msg/s) for
   the latency; each figure's robust relative sigma (1.4826 x MAD / median, as the gate
   measures noise: reports/verdict.py).
2. A/A nights: histories of 20 nights of that noise (Gaussian, relative, each figure its own
   sigma) and nothing else; the gate judges the 20th. A REGRESSION is a false alarm;
   INCONCLUSIVE is counted apart (the gate declining, not crying wolf).
3. Steps: 15 nights of noise, then nights with the receive rate 3, 5 or 10 % lower (or the
   latency p99 as much higher), judged after each until the gate says REGRESSION: the nights
   it took, and how many trials saw it within 2 nights.

4. A-B-A (reports.aba): checks of r runs a leg (baseline, candidate, baseline again) drawn
   from the same noise: false alarms over A/A/A checks, and how often a candidate 5 % slower
   (receive rate) is a REGRESSION in one check, and in one of two (two nights).

5. History size: a gate's time over 100 to 3,000 runs of 2 % noise with a 10 % drop near the
   end, as `maestro history --gate` judges (the newest 400 analysed), and with every run analysed
   up to 1,000 (E-divisive grows with the square of the runs). Target: none set by the issue;
   a nightly job's gate should not take minutes.

Each under the default rules (a 5 % drop, a 10 % rise) and under noise-unit rules (3sigma for
both), which adapt to the testbed. Targets (#39): at most 1 false alarm in 100 A/A nights; a 5 %
step at the measured noise found within 2 nights, by change points or by the A-B-A mode. Prints
figures; asserts nothing.

    python bench/verdict_power.py           # 8 real runs of each kind, 100 A/A nights, 20 trials a step
    python bench/verdict_power.py --smoke   # 2 real runs of each kind, 3 nights, 2 trials of a 5 % step
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coordinator import FixedRateTest, Maestro
from reports.aba import AbaRun, Legs, judge_aba
from reports.history import FIGURES, Run, analyse
from reports.verdict import GateRules, Threshold, Verdict, judge, noise_of

QUEUE_URL = "amqp://guest:guest@127.0.0.1:5672/maestro-verdict-bench-{}"
BASELINE_NIGHTS = 15
MAX_STEP_NIGHTS = 6
RULES = {
    "default (5 % drop, 10 % rise)": GateRules(),
    "noise units (3sigma)": GateRules(throughput_drop=Threshold(3.0, True), latency_rise=Threshold(3.0, True)),
}


@dataclass(frozen=True)
class Noise:
    """Each figure's level and relative sigma: what a night is drawn from."""

    name: str
    level: dict[str, float]
    sigma: dict[str, float]


def measured_noise(runs: int, seconds: float) -> Noise:
    """The figures of real runs through RabbitMQ, on one set of long-lived daemons."""
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="maestro-verdict-") as scratch, Maestro.local(data=Path(scratch)) as m:
        for kind, rate in (("unbounded", 0.0), ("fixed", 1000.0)):
            for _ in range(runs):
                test = FixedRateTest(send_url=QUEUE_URL.format(uuid.uuid4().hex[:8]), rate=rate, duration=seconds)
                summary = m.run(test, progress=False).summary
                keys = ("receive_rate",) if kind == "unbounded" else ("latency_p50_us", "latency_p99_us")
                for fig in FIGURES:
                    if fig.key in keys and (value := fig.read(summary)) is not None:
                        figures.setdefault(fig.key, []).append(value)
    level = {key: statistics.median(values) for key, values in figures.items()}
    sigma = {key: noise_of(values).sigma for key, values in figures.items()}
    for key, values in figures.items():
        shown = ", ".join(f"{v:,.0f}" for v in values)
        print(f"  {key}: {shown}: median {level[key]:,.0f}, sigma {100 * sigma[key]:.2f} %")
    level["latency_p999_us"] = 2 * level.get("latency_p99_us", 2000.0)
    sigma["latency_p999_us"] = sigma.get("latency_p99_us", 0.05)
    return Noise("measured here", level, sigma)


def synthetic(percent: float) -> Noise:
    level = {"receive_rate": 10_000.0, "latency_p50_us": 500.0, "latency_p99_us": 2_000.0, "latency_p999_us": 4_000.0}
    return Noise(f"synthetic {percent:g} %", level, dict.fromkeys(level, percent / 100))


def _night(n: int, noise: Noise, rng: np.random.Generator, step: dict[str, float]) -> Run:
    values: dict[str, float | None] = {"loss_ratio": 0.0, "duplicate_ratio": 0.0}
    for key, level in noise.level.items():
        values[key] = level * (1 + step.get(key, 0.0)) * (1 + noise.sigma[key] * rng.standard_normal())
    return Run(f"night-{n:03d}", f"{n:06d}", "success", values, workload="w", testbed="t")


def aa_nights(noise: Noise, rules: GateRules, trials: int, rng: np.random.Generator) -> Counter[Verdict]:
    verdicts: Counter[Verdict] = Counter()
    for _ in range(trials):
        nights = [_night(n, noise, rng, {}) for n in range(20)]
        verdicts[judge(analyse("aa", nights), rules).verdict] += 1
    return verdicts


def nights_to_detect(
    noise: Noise, rules: GateRules, step: dict[str, float], trials: int, rng: np.random.Generator
) -> list[int | None]:
    """For each trial, the nights after the step until a REGRESSION of the stepped figure (None:
    not within MAX_STEP_NIGHTS); a regression another figure's noise made is no detection."""
    (key,) = step
    title = next(f.title for f in FIGURES if f.key == key) + " "
    found: list[int | None] = []
    for _ in range(trials):
        nights = [_night(n, noise, rng, {}) for n in range(BASELINE_NIGHTS)]
        seen = None
        for after in range(1, MAX_STEP_NIGHTS + 1):
            nights.append(_night(len(nights), noise, rng, step))
            verdict = judge(analyse("step", nights), rules)
            if verdict.verdict is Verdict.REGRESSION and any(f.startswith(title) for f in verdict.findings):
                seen = after
                break
        found.append(seen)
    return found


def _aba_run(leg: str, n: int, noise: Noise, rng: np.random.Generator, step: dict[str, float]) -> AbaRun:
    night = _night(n, noise, rng, step)
    return AbaRun(f"{leg}-{n}", "success", night.figures)


@dataclass(frozen=True)
class AbaDraw:
    noise: Noise
    rules: GateRules
    runs: int  # a leg

    def checks(self, checks: int, step: dict[str, float], rng: np.random.Generator) -> list[Verdict]:
        """The verdicts of `checks` A-B-A checks, the candidate moved by `step`."""
        verdicts = []
        for _ in range(checks):
            legs = Legs(
                tuple(_aba_run("a1", n, self.noise, rng, {}) for n in range(self.runs)),
                tuple(_aba_run("b", n, self.noise, rng, step) for n in range(self.runs)),
                tuple(_aba_run("a2", n, self.noise, rng, {}) for n in range(self.runs)),
            )
            verdicts.append(judge_aba(legs, self.rules).verdict)
        return verdicts


def _steps(percent: float) -> dict[str, dict[str, float]]:
    return {"rate drop": {"receive_rate": -percent / 100}, "p99 rise": {"latency_p99_us": percent / 100}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="real runs of each kind (default: %(default)s)")
    parser.add_argument("--nights", type=int, default=100, help="A/A nights per noise and rules (default: %(default)s)")
    parser.add_argument("--trials", type=int, default=20, help="trials per step (default: %(default)s)")
    parser.add_argument("--smoke", action="store_true", help="2 real runs of each kind, 3 nights, 2 trials of 5 %%")
    args = parser.parse_args()
    runs, nights, trials, seconds = (2, 3, 2, 1.0) if args.smoke else (args.runs, args.nights, args.trials, 4.0)
    percents = (5.0,) if args.smoke else (3.0, 5.0, 10.0)
    started = time.monotonic()
    rng = np.random.default_rng(2026)

    print(f"1. noise of {runs} real runs of each kind through RabbitMQ ({seconds:g} s each)")
    profiles = [measured_noise(runs, seconds), synthetic(1.0), synthetic(2.0)]

    print(f"\n2. A/A: {nights} histories of 20 nights without a change, the 20th judged")
    print(f"   {'noise':<16} {'rules':<32} {'false alarms':>12} {'inconclusive':>12} {'pass':>6}")
    for noise in profiles:
        for rules_name, rules in RULES.items():
            v = aa_nights(noise, rules, nights, rng)
            print(
                f"   {noise.name:<16} {rules_name:<32} {v[Verdict.REGRESSION]:>8} / {nights:<3}"
                f"{v[Verdict.INCONCLUSIVE]:>12} {v[Verdict.PASS]:>6}"
            )

    never = f"'-': not within {MAX_STEP_NIGHTS}"
    print(f"\n3. steps after {BASELINE_NIGHTS} nights: nights until its REGRESSION ({trials} trials; {never})")
    print(f"   {'noise':<16} {'rules':<32} {'step':<16} {'median':>6} {'within 2':>9}")
    for noise in (profiles[0], profiles[2]):
        for rules_name, rules in RULES.items():
            for percent in percents:
                for what, step in _steps(percent).items():
                    found = nights_to_detect(noise, rules, step, trials, rng)
                    median = _median_nights(found)
                    within = sum(1 for f in found if f is not None and f <= 2)
                    label = f"{percent:g} % {what}"
                    print(f"   {noise.name:<16} {rules_name:<32} {label:<16} {median:>6} {within:>5} / {trials}")
    aba_runs = (3,) if args.smoke else (5, 10, 20, 40, 60)
    checks = 3 if args.smoke else 10 * args.nights
    print(f"\n4. A-B-A at the measured noise: {checks} checks each; a 5 % rate drop found in one, and in one of two")
    head = f"{'rules':<32} {'runs a leg':>10} {'false alarms':>14} {'inconclusive':>12} {'5 % in one':>11}"
    print(f"   {head} {'in two':>7}")
    for rules_name, rules in RULES.items():
        for runs in aba_runs:
            draw = AbaDraw(profiles[0], rules, runs)
            aa = Counter(draw.checks(checks, {}, rng))
            drop = [v is Verdict.REGRESSION for v in draw.checks(2 * checks, {"receive_rate": -0.05}, rng)]
            one = sum(drop[:checks]) / checks
            two = sum(a or b for a, b in zip(drop[::2], drop[1::2], strict=True)) / checks
            alarms = f"{aa[Verdict.REGRESSION]:>8} / {checks:<5}"
            print(
                f"   {rules_name:<32} {runs:>10} {alarms}{aa[Verdict.INCONCLUSIVE]:>12} {100 * one:>9.0f} %"
                f" {100 * two:>5.0f} %"
            )
    history_sizes(profiles[2], (100, 500) if args.smoke else (100, 400, 1_000, 3_000), rng)
    print(f"\n({time.monotonic() - started:.0f} s)")
    return 0


def history_sizes(noise: Noise, sizes: tuple[int, ...], rng: np.random.Generator) -> None:
    """Part 5: a gate's time over a history of each size, a 10 % drop on its last 2 nights
    (news to the gate): as `maestro history --gate` judges it (the newest DEFAULT_LAST_RUNS
    analysed), and every run analysed where that is within reach (E-divisive grows with the
    square of the runs)."""
    print(f"\n5. a gate over a history of N runs ({noise.name}; a 10 % drop on the last 2 runs)")
    print(f"   {'runs':>6} {'analysed':>9} {'gate s':>8} {'verdict':<13} {'every run analysed, s':>22}")
    for n in sizes:
        nights = [_night(i, noise, rng, {"receive_rate": -0.10} if i >= n - 2 else {}) for i in range(n)]
        began = time.perf_counter()
        history = analyse("size", nights)
        verdict = judge(history, GateRules()).verdict
        gate_s = time.perf_counter() - began
        whole = ""
        if n <= 1_000:
            began = time.perf_counter()
            analyse("size", nights, last=n)
            whole = f"{time.perf_counter() - began:.1f}"
        print(f"   {n:>6} {len(history.runs):>9} {gate_s:>8.1f} {verdict.name:<13} {whole or 'not run':>22}")


def _median_nights(found: list[int | None]) -> str:
    """The median over trials, a trial that never saw it counting as later than any."""
    ranked = sorted(found, key=lambda f: float("inf") if f is None else float(f))
    middle = ranked[len(ranked) // 2]
    return "-" if middle is None else str(middle)


if __name__ == "__main__":
    sys.exit(main())
