"""`autoexp config schema` types every key under restart, monitoring, slurm and backend: every shipped
config validates against it, and a misspelt key under `restart.rules[].match` is rejected."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from oellm_autoexp.config.experiment import load_composed
from oellm_autoexp.config.files import read_yaml
from oellm_autoexp.config.interpolation import resolve
from oellm_autoexp.config.schema import experiment_schema
from tests.paths import REPO

CONFIG = REPO / "config"
SCHEMA = experiment_schema()


def _validator(definition: str | None = None) -> Draft202012Validator:
    schema = SCHEMA if definition is None else {"$ref": f"#/$defs/{definition}", "$defs": SCHEMA["$defs"]}
    return Draft202012Validator(schema)


def _errors(instance: Any, definition: str | None = None) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in _validator(definition).iter_errors(instance)
    ]


def _experiment(path: Path) -> dict[str, Any]:
    composed = load_composed(path, [], [])
    return resolve(composed.data, composed.provenance, {"SLURM_ACCOUNT": "project"})  # juwels names one


@pytest.mark.parametrize("path", sorted((CONFIG / "experiments").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_experiment_validates(path: Path) -> None:
    assert _errors(_experiment(path)) == []


@pytest.mark.parametrize(
    ("group", "definition"),
    [("restart", "RestartPolicy"), ("monitoring", "MonitoringSection"), ("slurm", "SlurmConfig")],
)
def test_every_shipped_group_file_validates(group: str, definition: str) -> None:
    files = sorted((CONFIG / group).glob("*.yaml"))
    assert files
    for path in files:
        data = read_yaml(path)
        data.pop("defaults", None)
        if group == "slurm":
            data = _without_interpolations(data)
        assert _errors(data, definition) == [], path


def _without_interpolations(data: Any) -> Any:
    # `${oc.env:...}` is resolved at composition; its type is checked on the composed experiments.
    if isinstance(data, dict):
        return {k: _without_interpolations(v) for k, v in data.items() if not _is_reference(v)}
    return data


def _is_reference(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("${")


def test_a_misspelt_key_under_a_rule_match_is_rejected() -> None:
    data = _experiment(CONFIG / "experiments" / "demo.yaml")
    assert _errors(data) == []
    bad = copy.deepcopy(data)
    bad["restart"]["rules"][0]["match"]["error_type"] = ["nccl"]  # error_types, misspelt
    (error,) = _errors(bad)
    assert error.startswith("restart/rules/0/match") and "error_type" in error


def test_the_sections_are_typed_with_enums_defaults_and_descriptions() -> None:
    """Not `additionalProperties: true`: keys, enums, defaults and the models' own descriptions."""
    props = SCHEMA["properties"]
    for section in ("restart", "monitoring", "slurm", "backend"):
        assert props[section].get("additionalProperties") is not True
    defs = SCHEMA["$defs"]
    monitoring = defs["MonitoringSection"]
    assert monitoring["additionalProperties"] is False
    assert monitoring["properties"]["fatal_settle_s"]["default"] == 5.0
    assert "burst of sibling lines" in monitoring["properties"]["fatal_settle_s"]["description"]
    assert monitoring["properties"]["log_watch"]["enum"] == ["auto", "inotify", "poll"]
    rule = defs["RestartRule"]["properties"]
    assert defs["RuleAction"]["enum"] == ["restart", "stop", "notify"]
    assert rule["max_retries"]["default"] == 3 and rule["max_retries"]["description"]
    assert "timeout" in defs["OutcomeKind"]["enum"]
    assert defs["Match"]["additionalProperties"] is False
    undocumented = [f"{name}.{key}" for name in ("MonitoringSection", "RestartRule", "RestartPolicy", "Match",
                                                  "SlurmConfig", "NotificationSettings", "WebhookSettings")
                    for key, prop in defs[name]["properties"].items() if not prop.get("description")]  # fmt: skip
    assert undocumented == []
