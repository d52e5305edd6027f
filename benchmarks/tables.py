"""Write the figure tables of benchmarks/README.md from the results files: no hand-copied numbers.

    python benchmarks/tables.py            # rewrite every table from its newest full run
    python benchmarks/tables.py --check    # exit 1 if a table differs from what the files give

Each table sits between `<!-- table:NAME -->` and `<!-- /table:NAME -->` in README.md (and the
engine table in docs/classification.md, "Speed") and is
made from ONE file, results/NAME-<date>.json (the newest full run; `-quick` runs are never
used), whose name and date head the table. A benchmark without a results file keeps a line
saying so.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "results"
README = BENCH_DIR / "README.md"
CLASSIFICATION_DOC = BENCH_DIR.parent / "docs" / "classification.md"  # its "Speed" table


def runs(name: str) -> list[Path]:
    """results/NAME-YYYY-MM-DD.json, oldest first (quick runs left out)."""
    return sorted(
        p for p in RESULTS.glob(f"{name}-*.json") if re.fullmatch(rf"{name}-\d{{4}}-\d\d-\d\d\.json", p.name)
    )


def newest(name: str) -> Path | None:
    """The latest full run's file."""
    files = runs(name)
    return files[-1] if files else None


def _s(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{max(digits, 3) if abs(value) < 0.1 else digits}f} s"


def _pcts(summary: dict[str, Any]) -> str:
    if not summary.get("n"):
        return "- | - | - | 0"
    return f"{_s(summary['p50'])} | {_s(summary['p90'])} | {_s(summary['p99'])} | {summary['n']}"


def fatal_to_decision(d: dict[str, Any]) -> list[str]:
    rows = [("ours: line → decision row committed", "ours_decision"),
            ("ours: line → replacement submitted (local executor)", "ours_resubmitted"),
            ("baseline: re-read logs every 2 s", "baseline_poll_2s"),
            ("baseline: re-read logs every 10 s (seed)", "baseline_poll_10s")]  # fmt: skip
    out = ["| | p50 | p90 | p99 | n |", "|---|---|---|---|---|"]
    return out + [f"| {label} | {_pcts(d[key])} |" for label, key in rows if key in d]


def fatal_to_resubmit(d: dict[str, Any]) -> list[str]:
    out = [f"`fatal_settle_s` = {d['fatal_settle_s']:g} s, Slurm poll {d['poll_interval_s']:g} s; "
           f"{d['per_kind']} job(s) per kind, the baseline one per kind.", "",
           "| process ends | ours: line → decision p50 / p99 | ours: line → `sbatch` returned p50 / p99 | "
           "n | baseline (squeue every 10 s): line → `sbatch` |", "|---|---|---|---|---|"]  # fmt: skip
    for kind in d["kinds"].values():
        dec, sub = kind["ours_decided"], kind["ours_resubmitted"]
        base = kind["baseline_resubmitted_s"]
        shown = "never, within the run" if base is None else _s(base, 1)
        label = kind["label"] + (" the line" if kind["label"].endswith("after") else "")
        out.append(f"| {label} | {_s(dec.get('p50'))} / {_s(dec.get('p99'))} | "
                   f"{_s(sub.get('p50'))} / {_s(sub.get('p99'))} | {sub['n']} | {shown} |")  # fmt: skip
    return out


def hang_detection(d: dict[str, Any]) -> list[str]:
    out = ["| last line → hang decided | p50 | p90 | p99 | n |", "|---|---|---|---|---|"]
    for v in d["variants"].values():
        setting = f"{v['executor']}, poll {v['poll_s']:g} s, T = {v['timeout_s']:g} s"
        out.append(f"| ours, {setting}: beyond T | {_pcts(v['ours_beyond_timeout'])} |")
        if "upstream_beyond_timeout" in v:
            out.append(f"| upstream's inactivity rule (5 polls AND T), {setting}: beyond T | "
                       f"{_pcts(v['upstream_beyond_timeout'])} |")  # fmt: skip
    for v in d["variants"].values():
        out.append(f"| no hang detection: until the preset's `--time` ({v['executor']} trials) | "
                   f"{_pcts(v['baseline_walltime_local_preset'])} |")  # fmt: skip
    early = [f"{v['upstream_fired_during_startup']} time(s) over {len(v['upstream_rows'])} jobs ({v['executor']})"
             for v in d["variants"].values() if "upstream_rows" in v]  # fmt: skip
    if early:
        out += ["", "- Upstream's rule also fired before a job's first line, in its start-up silence (it has no "
                f"start-up allowance): {', '.join(early)}."]  # fmt: skip
    for label, u in d.get("upstream_shipped", {}).items():
        low, high = u["last_line_to_fire_s"]
        out.append(f"- Upstream as shipped ({label}: poll {u['poll_s']:g} s, {u['polls']} polls AND "
                   f"{u['timeout_s']:g} s), computed: last line → fire {low:g}–{high:g} s.")  # fmt: skip
    return out


def poll_1000_jobs(d: dict[str, Any]) -> list[str]:
    steady, fatal = d["steady"], d["fatal_to_decision"]
    return [
        f"{d['running_jobs']} RUNNING jobs on {d['nodes']} emulated node(s), a line per job every "
        f"{d['line_every_s']:g} s, {d['polls']} polls in {d['window_s']:.0f} s.", "",
        "| | figure | goal |", "|---|---|---|",
        f"| Slurm calls per poll (max) | {steady['calls_per_poll_max']} | ≤ 2 |",
        f"| monitor CPU, one core, over the window | {steady['cpu_percent_of_one_core']:.1f} % | ≤ 20 % |",
        f"| CPU per poll (self, median) | {_s(steady['cpu_per_poll_median_s'], 3)} | |",
        f"| RSS (end / peak) | {d['rss_end_mib']:.0f} / {d['rss_peak_mib']:.0f} MiB | |",
        f"| fatal line → decision, p50 / p99 (n = {fatal['n']}) | {_s(fatal.get('p50'))} / "
        f"{_s(fatal.get('p99'))} | p99 < 2 s beyond `fatal_settle_s` ({d['fatal_settle_s']:g} s) |",
        *_earlier_runs(d),
    ]  # fmt: skip


def _earlier_runs(d: dict[str, Any]) -> list[str]:
    """The same command on earlier code, as the results file records them (newest last)."""
    earlier = d.get("earlier_runs") or []
    if not earlier:
        return []
    rows = ["", "| code | monitor CPU, one core | fatal p99 |", "|---|---|---|"]
    for r in [*reversed(earlier), {**d["steady"], "code": d.get("code", "this run"),
                                   "fatal_to_decision_p99": d["fatal_to_decision"].get("p99")}]:  # fmt: skip
        rows.append(
            f"| {r['code']} | {r['cpu_percent_of_one_core']:.1f} % | {_s(r['fatal_to_decision_p99'])} |"
        )
    return rows


def classify_throughput(d: dict[str, Any]) -> list[str]:
    ev = d["upstream_events"]
    out = [f"{d['patterns']} patterns (`megatron_production`); upstream HEAD scans {ev['head']} events, its "
           f"production branch {ev['prod']} (all new text per poll, `finditer`, events with an action); "
           f"engine {d['engine']}; load average {d['load_avg_1min'][0]:g} before, {d['load_avg_1min'][1]:g} after.",
           "", "| corpus | row | MB/s min | median | max |", "|---|---|---|---|---|"]  # fmt: skip
    labels = {"head": "upstream HEAD (3 events)", "prod": "upstream production branch (21 events)",
              "line_loop": "line-by-line (before)", "ours": "ours (ahocorasick-rs, the default install)",
              "ours_re": "ours, str.find fallback"}  # fmt: skip
    for corpus in ("healthy", "dense"):
        c = d[corpus]
        for row, label in labels.items():
            r = c["mb_s"][row]
            out.append(f"| {corpus} {c['mb']:.0f} MB ({c['rounds']} rounds) | {label} | {r['min']:.1f} | "
                       f"{r['median']:.1f} | {r['max']:.1f} |")  # fmt: skip
    h, dn = d["healthy"], d["dense"]
    out += ["", "| ratio (median of per-round ratios; > 1: ours faster) | healthy | dense |", "|---|---|---|"]
    for key, label in (("ours_over_head", "in-process: ours / upstream HEAD"),
                       ("ours_over_prod", "in-process: ours / upstream production"),
                       ("ours_re_over_head", "in-process: str.find fallback / upstream HEAD"),
                       ("ours_re_over_prod", "in-process: str.find fallback / upstream production")):  # fmt: skip
        out.append(f"| {label} | x{h['ratios'][key]['median']:.1f} | x{dn['ratios'][key]['median']:.1f} |")
    for key, label in (("ours_over_head", "whole process: `autoexp classify LOG` / upstream HEAD"),
                       ("ours_over_prod", "whole process: `autoexp classify LOG` / upstream production")):  # fmt: skip
        hw, dw = h["whole_process"]["ratios"][key], dn["whole_process"]["ratios"][key]
        out.append(f"| {label} | x{hw['median']:.1f} | x{dw['median']:.1f} |")
    out.append("")
    for corpus in ("healthy", "dense"):
        c = d[corpus]
        w = c["whole_process"]["seconds"]
        out.append(f"- {corpus}: whole process, median s: ours {w['ours']['median']:.2f}, upstream HEAD "
                   f"{w['head']['median']:.2f}, production {w['prod']['median']:.2f}; same signals as the "
                   f"line-by-line path: {c['same_as_line_loop']['ours'] and c['same_as_line_loop']['ours_re']} "
                   f"({c['signals']} non-progress signals; progress signals {c['progress_signals']['line_loop']} "
                   f"→ {c['progress_signals']['ours']})")  # fmt: skip
    return out


def classify_install(d: dict[str, Any]) -> list[str]:
    h = d["healthy"]
    out = [f"A venv made by `pip install .` (no extras: ahocorasick-rs {d['ahocorasick_rs']} comes as a "
           f"dependency); the healthy 50 MB log, {h['rounds']} rounds, whole processes.", "",
           "| | median s | min s | max s |", "|---|---|---|---|"]  # fmt: skip
    labels = {"ours": "ours: `autoexp classify LOG`", "head": "upstream HEAD (3 events)",
              "prod": "upstream production branch (21 events)"}  # fmt: skip
    for row, label in labels.items():
        s = h["seconds"][row]
        out.append(f"| {label} | {s['median']:.2f} | {s['min']:.2f} | {s['max']:.2f} |")
    r = h["ratios"]
    return [*out, "", f"Ours / upstream HEAD x{r['ours_over_head']['median']:.1f}, / production "
                      f"x{r['ours_over_prod']['median']:.1f} (medians of per-round ratios)."]  # fmt: skip


def cli_startup(d: dict[str, Any]) -> list[str]:
    out = [f"{d['attempts']} attempts in one session; {d['rounds']} rounds, every command once a round (whole "
           f"processes); load average {d['load_before']:.2f} before, {d['load_after']:.2f} after.", "",
           "| command | median s | min s | max s | beyond `python -c pass` s | budget s | CPU median s |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for label, r in d["rows"].items():
        beyond = "(baseline)" if "budget" not in r else f"{r['beyond_floor']:.3f}"
        out.append(f"| `{label}` | {r['median']:.3f} | {r['min']:.3f} | {r['max']:.3f} | {beyond} | "
                   f"{r.get('budget', '')} | {r['cpu_median']:.3f} |")  # fmt: skip
    return out


def classify_engines(d: dict[str, Any]) -> list[str]:
    healthy = d["healthy"]
    out = ["| engine: the rare keywords of one 4 MB chunk | MB/s | build, ms |", "|---|---|---|"]
    out += [f"| {name} | {row['mb_s']:.1f} | {_build_ms(row)} |" for name, row in d["engines"].items()]
    return [*out, "", *classify_throughput(d)[2:]] if healthy else out


def _build_ms(row: dict[str, Any]) -> str:
    return f"{row['build_ms']:.1f}" if "build_ms" in row else "-"


def replay(d: dict[str, Any]) -> list[str]:
    spread = d.get("spread_s")
    if spread is None:  # the single-round form of the benchmark
        return [f"{d['log_mb']:.1f} MB, {d['lines']} lines.", "", "| | s | MB/s |", "|---|---|---|",
                f"| ours: `autoexp replay` (read + line times {d['replay_read_and_times_s']:.2f} s, simulation "
                f"{d['replay_simulation_s']:.2f} s) | {d['replay_s']:.2f} | {d['log_mb'] / d['replay_s']:.1f} |",
                f"| baseline: `autoexp classify` | {d['classify_s']:.2f} | {d['log_mb'] / d['classify_s']:.1f} |",
                "", f"Ratio {d['ratio']:.2f}."]  # fmt: skip
    rows = [("ours: `autoexp replay`", "replay"), ("&nbsp;&nbsp;read + line times", "read"),
            ("&nbsp;&nbsp;simulation", "simulation"), ("baseline: `autoexp classify`", "classify")]  # fmt: skip
    out = [f"{d['log_mb']:.1f} MB, {d['lines']} lines, {d['rounds']} rounds alternating; line index: "
           f"{d['line_index']}.", "", "| | min s | median s | max s | MB/s (median) |", "|---|---|---|---|---|"]  # fmt: skip
    for label, name in rows:
        s = spread[name]
        out.append(
            f"| {label} | {s['min']:.2f} | {s['median']:.2f} | {s['max']:.2f} | {d['log_mb'] / s['median']:.1f} |"
        )
    ratios = " ".join(f"{r:.2f}" for r in d["ratio_per_round"])
    return [*out, "", f"Ratio {d['ratio']:.2f} (medians); per round {ratios}."]


def soak_restarts(d: dict[str, Any]) -> list[str]:
    return [
        "| cycles | monitors started / SIGKILLed | flaky squeue/sacct | time | lost | duplicates | "
        "spurious restarts | decisions missing |", "|---|---|---|---|---|---|---|---|",
        f"| {d['cycles']} | {d['monitors_started']} / {d['monitors_killed']} | {d['flaky']:.0%} | "
        f"{d['seconds']:.0f} s | {d['jobs_lost']} | {d['duplicates']} | {d['spurious_restarts']} | "
        f"{d['decisions_missing']} |",
    ]  # fmt: skip


def soak_supervision(d: dict[str, Any]) -> list[str]:
    return [
        "| cycles | monitors started / SIGKILLed / SIGSTOPped | taken over / fenced off (exit 3) | time | "
        "overlaps | charged twice | healthy cancelled | not restarted | lost | duplicates | decisions missing |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {d['cycles']} | {d['started']} / {d['killed']} / {d['paused']} | {d['taken_over']} / "
        f"{d['fenced_exit_3']} | {d['seconds']:.0f} s | {d['overlaps']} | {d['charged_twice']} | "
        f"{d['healthy_cancelled']} | {d['failures_not_restarted']} | {d['jobs_lost']} | {d['duplicates']} | "
        f"{d['decisions_missing']} |",
    ]  # fmt: skip


def corpus_accuracy(d: dict[str, Any]) -> list[str]:
    fit, held = d["fitted"], d["held_out"]
    return [
        "| | class accuracy | decision accuracy | excerpts |", "|---|---|---|---|",
        f"| fitted (the patterns were written for these) | {fit['accuracy']:.1%} | {fit['decision_accuracy']:.1%} | {fit['n']} |",
        f"| held out (never used to write or tune one) | {held['accuracy']:.1%} | {held['decision_accuracy']:.1%} | {held['n']} |",
        "", "```", *d["table"].splitlines(), "```",
    ]  # fmt: skip


def text_only_reader(d: dict[str, Any]) -> list[str]:
    def share(f: dict[str, int], key: str) -> str:
        return f"{f[key]}/{f['n']} ({f[key] / f['n']:.1%})"

    out = ["| set | excerpts | class right: reader | class right: classifier | decision right: reader | "
           "decision right: classifier | both wrong | at least one right |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, label in (("fitted", "fitted"), ("held_out", "held out")):
        f = d[name]
        out.append(
            f"| {label} | {f['n']} | {share(f, 'reader_right')} | {share(f, 'ours_right')} | "
            f"{share(f, 'reader_decides_right')} | {share(f, 'ours_decides_right')} | {f['both_wrong']} | "
            f"{share(f, 'either_right')} |"
        )
    by_family = d.get("families")
    if not by_family:
        return out
    out += ["", "| family | held out: reader / classifier / excerpts | fitted: reader / classifier / excerpts |",
            "|---|---|---|"]  # fmt: skip
    for family in sorted(set(by_family["fitted"]) | set(by_family["held_out"])):
        cells = []
        for name in ("held_out", "fitted"):
            f = by_family[name].get(family)
            cells.append(f"{f['reader_right']} / {f['ours_right']} / {f['n']}" if f else "-")
        out.append(f"| {family} | {cells[0]} | {cells[1]} |")
    return out


def catalog_cost(d: dict[str, Any]) -> list[str]:
    why = "given with --base" if d.get("base_given") else "the merge-base with main"
    out = [f"Base: `{d['base'][:10]}` ({why}), same corpora, trees interleaved round by round.", "",
           "| corpus | patterns (this tree / base) | MB/s this tree: min / median / max | MB/s base: min / median / max | median ratio |",
           "|---|---|---|---|---|"]  # fmt: skip
    for corpus in ("healthy", "dense"):
        c = d[corpus]
        cells = [
            " / ".join(f"{f(c['rows'][k]):.1f}" for f in (min, statistics.median, max))
            for k in ("this tree", "base")
        ]
        out.append(
            f"| {corpus} | {c['patterns']['this tree']} / {c['patterns']['base']} | {cells[0]} | {cells[1]} | x{c['ratio']:.2f} |"
        )
    return out


def unsupervised(d: dict[str, Any]) -> list[str]:
    login = d["login_s"]
    shown = (
        f"{login:.1f} s"
        if login is not None
        else f"never within {d['login_wait_s']:.0f} s: a human must resume it"
    )
    return [
        "| the monitor died | seconds until a monitor holds the session again |", "|---|---|",
        f"| ours, `--supervisor slurm`: its Slurm job scancelled | median {d['ours_median_s']:.1f} s "
        f"({', '.join(f'{s:.1f}' for s in d['ours_s'])}) |",
        f"| baseline: a monitor on the login node (today's default; upstream's) SIGKILLed | {shown} |",
    ]  # fmt: skip


def time_to_gpu(d: dict[str, Any]) -> list[str]:
    load = ", ".join(
        f"{p}: {v['queued']} queued, {v['seconds'][0]:g}-{v['seconds'][1]:g} s jobs"
        for p, v in d["load"].items()
    )
    winners = ", ".join(f"{p} {n}" for p, n in d["fan_out_winners"].items())
    return [
        f"{d['trials']} trials per arm, interleaved; poll {d['poll_s']:g} s; scripted load ({load}).", "",
        "| submit → RUNNING | p50 | p90 | p99 | n |", "|---|---|---|---|---|",
        f"| baseline: one strategy (partition a100) | {_pcts(d['one_strategy'])} |",
        f"| ours: fan-out over a100, h100, a100_spill | {_pcts(d['fan_out'])} |", "",
        f"Fan-out winners: {winners}. Losers still running after their cancel: {d['losers_running_after_cancel']}.",
    ]  # fmt: skip


FLEET_ROWS = (
    ("oracle (instant detection, perfect blame, a human at once)", "oracle"),
    ("paged oracle (the same; its human answers pages as ours does)", "oracle_paged"),
    ("ours, shipped default (`restart=megatron_transient`)", "autoexp"),
    ("ours, shipped default + pre-flight (60 s, gpu_hw)", "autoexp_preflight"),
    ("ours, `restart=fleet`", "autoexp_fleet"),
    ("ours, `restart=fleet` + pre-flight (60 s, gpu_hw)", "autoexp_fleet_preflight"),
    ("ours, `restart=fleet` + pre-flight with pairwise (gpu_hw, network_link)", "autoexp_fleet_preflight_pairwise"),
    ("ours, shipped default + pre-flight on suspicion (`preflight: on_suspicion`, pairwise)", "autoexp_suspicion"),
    ("ours, `restart=fleet` + pre-flight on suspicion (pairwise)", "autoexp_fleet_suspicion"),
    ("ours, shipped default, exclusions as before #29 (a fixed 24 h, no repair seen, no cap)", "autoexp_exclusions_24h"),
    ("ours, shipped default without the silent-hang stack-dump probe (as before)", "autoexp_no_stack_probe"),
    ("ours, shipped default with the plain 15-min hang floor everywhere (before session 9)", "autoexp_plain_floor"),
    ("upstream production (prod/oellm_32b_dense, auto_restart_ckptreset)", "upstream"),
    ("upstream main (state restarts, 300 s inactivity)", "upstream_main"),
    ("no supervisor (a human looks twice a day)", "none"),
)  # fmt: skip
FLEET_CAUSES = ("detection_delay", "wrong_stop", "wrong_restart", "repeated_bad_node", "queue_wait", "lost_work",
                "restart_overhead", "preflight", "awaiting_fix", "checkpoint_save")  # fmt: skip


def fleet_ettr(d: dict[str, Any]) -> list[str]:
    out = [f"Commit `{d['commit'][:10]}`{' (dirty)' if d['dirty'] else ''}; {d['days']:g} simulated days per setting, "
           "seed 1, 30-minute checkpoints; one fault sequence per setting, every policy on it. Points and "
           "GPU-hours per month are behind the paged oracle (the ceiling of what a supervisor can win) and, in "
           "brackets, the oracle whose human is there at once.", ""]  # fmt: skip
    for name, s in d["settings"].items():
        st = s["settings"]
        out += [
            f"**{name}** ({s['mix']['source']}): {st['gpus']:,} GPUs, save {st['save_s']:g} s, restart "
            f"{st['startup_s'] + st['load_s']:.0f} s, queue median {st['queue_median_s']:g} s; {s['faults']:,} faults "
            f"(one every {s['mean_hours_between_faults']} h); simulated in {s['wall_s']:.1f} s.",
            "",
            "| policy | ETTR | points behind the paged oracle (the oracle) | GPU-hours per month behind the paged "
            "oracle | restarts | human interventions |",
            "|---|---:|---:|---:|---:|---:|",
        ]  # fmt: skip
        for label, key in FLEET_ROWS:
            row = s["policies"].get(key)
            if row is not None:
                out.append(f"| {label} | {row['ettr']:.3f} | {row['gap_to_oracle_paged_points']:.1f} "
                           f"({row['gap_to_oracle_points']:.1f}) | {row['gpu_hours_per_month_behind_oracle_paged']:,} | "
                           f"{row['restarts']:,} | {row['human_interventions']:,} |")  # fmt: skip
        p = s["policies"]
        per_month = st["gpus"] * 730

        def margin(a: str, b: str, p: dict[str, Any] = p, pm: int = per_month) -> str:
            return f"{(p[a]['ettr'] - p[b]['ettr']) * pm:+,.0f}"

        seeds = s.get("other_seeds", {})
        spread = "; ".join(
            f"seed {k}: paged oracle {v['oracle_paged']:.3f}, ours {v['autoexp']:.3f}, `fleet` {v['autoexp_fleet']:.3f}, "
            f"upstream {v['upstream']:.3f}" for k, v in seeds.items()
        )  # fmt: skip
        gaps = [p["autoexp"]["gap_to_oracle_paged_points"]] + [
            100 * (v["oracle_paged"] - v["autoexp"]) for v in seeds.values()
        ]
        out += ["", f"Ours (shipped) behind the paged oracle over seeds 1-{len(gaps)}: mean {sum(gaps) / len(gaps):.2f} "
                    f"points (from {min(gaps):.2f} to {max(gaps):.2f}); one seed's gap moves by tenths with the hour "
                    "a stop happens to wait for its human."]  # fmt: skip
        out += ["", f"Margin per month, GPU-hours: ours (shipped) vs upstream {margin('autoexp', 'upstream')}, "
                    f"vs none {margin('autoexp', 'none')}; `restart=fleet` vs upstream {margin('autoexp_fleet', 'upstream')}. "
                    f"Other seeds (the draw's spread): {spread or '-'}.", ""]  # fmt: skip
        out += ["| lost GPU-hours (whole run) | " + " | ".join(c.replace("_", " ") for c in FLEET_CAUSES) + " |",
                "|---|" + "---:|" * len(FLEET_CAUSES)]  # fmt: skip
        for _label, key in FLEET_ROWS:
            row = s["policies"].get(key)
            if row is not None:
                lost = row["lost_gpu_hours"]
                out.append(
                    f"| {key} | " + " | ".join(f"{lost.get(c, 0.0):,.0f}" for c in FLEET_CAUSES) + " |"
                )
        out.append("")
    if d.get("what_ifs"):
        out += ["What-ifs, `llama3` setting, one default changed at a time (ours; the ceilings beside it):", "",
                "| change | ETTR | paged oracle | oracle | human interventions | wrong stop | repeated bad node "
                "| detection delay | pre-flight |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for w in d["what_ifs"]:
            lost = w["lost_gpu_hours"]
            out.append(f"| {w['label']} | {w['ettr']:.3f} | {w.get('oracle_paged_ettr', 0.0):.3f} | {w['oracle_ettr']:.3f} | "
                       f"{w['human_interventions']} | {lost['wrong_stop']:,.0f} | {lost['repeated_bad_node']:,.0f} | "
                       f"{lost['detection_delay']:,.0f} | {lost.get('preflight', 0.0):,.0f} |")  # fmt: skip
        out.append("")
    return out[:-1]


def successor_restart(d: dict[str, Any]) -> list[str]:
    out = [f"{d['trials']} trials per row, failures {d['fail_stagger_s']:g} s apart; commit `{d['commit'][:10]}`"
           f"{' (dirty tree)' if d['dirty'] else ''}.", "",
           "| failure → next attempt RUNNING | p50 | p90 | p99 | n | missed |", "|---|---|---|---|---|---|"]  # fmt: skip
    for row in d["rows"].values():
        out.append(f"| {row['label']} | {_pcts(row)} | {row['missed']} |")
    return out


# One line per benchmark naming its main figures: the previous run's is shown where it differs.
HEADLINES: dict[str, Callable[[dict[str, Any]], str]] = {
    "fatal_to_decision": lambda d: (
        f"ours p99 {_s(d['ours_decision']['p99'])}, "
        f"baseline (2 s re-read) p99 {_s(d['baseline_poll_2s']['p99'])}"
    ),
    "fatal_to_resubmit": lambda d: (
        "line → decision p99 "
        + ", ".join(f"{k['label']} {_s(k['ours_decided'].get('p99'))}" for k in d["kinds"].values())
    ),
    "hang_detection": lambda d: (
        "beyond T p99 "
        + ", ".join(
            f"{v['executor']} {_s(v['ours_beyond_timeout'].get('p99'))}" for v in d["variants"].values()
        )
    ),
    "poll_1000_jobs": lambda d: (
        f"{d['running_jobs']} jobs: {d['steady']['calls_per_poll_max']} calls/poll, "
        f"{d['steady']['cpu_percent_of_one_core']:.1f} % of a core, fatal p99 {_s(d['fatal_to_decision'].get('p99'))}"
    ),
    "classify_throughput": lambda d: (
        "whole process, ours / upstream production: healthy "
        f"x{d['healthy']['whole_process']['ratios']['ours_over_prod']['median']:.1f}, dense "
        f"x{d['dense']['whole_process']['ratios']['ours_over_prod']['median']:.1f}"
    ),
    "cli_startup": lambda d: ", ".join(f"{k} {r['median']:.3f} s" for k, r in d["rows"].items()),
    "time_to_gpu": lambda d: (
        f"submit → RUNNING p50: one strategy {_s(d['one_strategy'].get('p50'))}, fan-out {_s(d['fan_out'].get('p50'))}"
    ),
    "soak_restarts": lambda d: (
        f"{d['cycles']} cycles, {d['monitors_killed']} SIGKILLs: lost {d['jobs_lost']}, duplicates "
        f"{d['duplicates']}, spurious {d['spurious_restarts']}, missing {d['decisions_missing']}"
    ),
    "fleet_ettr": lambda d: ", ".join(
        f"{n}: ours {s['policies']['autoexp']['ettr']:.3f}, oracle {s['policies']['oracle']['ettr']:.3f}, "
        f"upstream {s['policies']['upstream']['ettr']:.3f}"
        for n, s in d["settings"].items()
    ),
    "successor_restart": lambda d: (
        "p50 " + ", ".join(f"{row['label']} {_s(row.get('p50'))}" for row in d["rows"].values())
    ),
    "replay": lambda d: (
        f"replay {d['replay_s']:.2f} s, classify {d['classify_s']:.2f} s, ratio {d['ratio']:.2f}"
    ),
}


def previous(name: str, data: dict[str, Any]) -> str:
    """The run before the newest, in a line, when its figures differ (empty otherwise)."""
    files, headline = runs(name), HEADLINES.get(name)
    if len(files) < 2 or headline is None:
        return ""
    old = json.loads(files[-2].read_text(encoding="utf-8"))
    try:
        before, now = headline(old), headline(data)
    except KeyError:  # an earlier form of the benchmark
        return f"Previous run: `{files[-2].name}` (an earlier form of this benchmark)."
    return "" if before == now else f"Previous run ({old['date']}, `{files[-2].name}`): {before}."


RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "fatal_to_decision": fatal_to_decision,
    "fatal_to_resubmit": fatal_to_resubmit,
    "hang_detection": hang_detection,
    "poll_1000_jobs": poll_1000_jobs,
    "classify_throughput": classify_throughput,
    "replay": replay,
    "time_to_gpu": time_to_gpu,
    "soak_restarts": soak_restarts,
    "soak_supervision": soak_supervision,
    "unsupervised": unsupervised,
    "corpus_accuracy": corpus_accuracy,
    "catalog_cost": catalog_cost,
    "text_only_reader": text_only_reader,
    "fleet_ettr": fleet_ettr,
    "successor_restart": successor_restart,
    "cli_startup": cli_startup,
    "classify_install": classify_install,
}
DOC_RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {"classify_engines": classify_engines}


FILE_OF = {"classify_engines": "classify_throughput"}


def table(name: str) -> str:
    renderer = RENDERERS.get(name) or DOC_RENDERERS[name]
    path = newest(FILE_OF.get(name, name))
    if path is None:
        return f"(no results/{FILE_OF.get(name, name)}-<date>.json yet)"
    data = json.loads(path.read_text(encoding="utf-8"))
    met = data.get("goal_met")
    code = (
        "commit not recorded"
        if data.get("commit") is None
        else f"commit {data['commit'][:7]}{' + uncommitted changes' if data.get('dirty') else ''}"
    )
    head = f"From `benchmarks/results/{path.name}` ({data['date']}, {code}, {data['machine']}, {data['cpus']} CPUs)"
    head += (
        "" if met is None else f"; goal {data.get('goal', 'of the issue')}: **{'MET' if met else 'MISSED'}**"
    )
    try:
        body = renderer(data)
    except KeyError as missing:  # a file written by an earlier version of the benchmark
        body = [f"(`{path.name}` predates this benchmark's current form (no {missing}): run it again)"]
    before = previous(FILE_OF.get(name, name), data) if name in RENDERERS else ""
    return "\n".join([head + ".", "", *body, *(["", before] if before else [])])


def render(text: str, names: Any = RENDERERS) -> str:
    for name in names:
        pattern = re.compile(rf"(<!-- table:{name} -->\n)(?:.*?\n)?(<!-- /table:{name} -->)", re.S)
        body = table(name) + "\n"
        text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(2), text)  # type: ignore[misc]
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the files are up to date")
    args = parser.parse_args()
    stale = []
    for path, names in ((README, RENDERERS), (CLASSIFICATION_DOC, DOC_RENDERERS)):
        old = path.read_text(encoding="utf-8")
        new = render(old, names)
        if new != old:
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check:
        print(
            f"tables differ from the results files in {', '.join(stale)}"
            if stale
            else "tables are up to date"
        )
        return 1 if stale else 0
    used = [path.name for path in map(newest, RENDERERS) if path is not None]
    print("tables written from", ", ".join(used))
    return 0


if __name__ == "__main__":
    sys.exit(main())
