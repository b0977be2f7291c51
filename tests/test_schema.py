"""A config key's range is declared in the type of the constructor parameter that reads it (``Annotated``), and
checked from there before any compute: up a class's bases, into nested settings, for a user's own target."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import pytest

from privbench.errors import ConfigError
from privbench.fl.genefl.settings import GeneSettings
from privbench.schema import (
    POSITIVE_INT,
    RATE,
    Flag,
    Gamma,
    Nested,
    Number,
    PositiveInt,
    Switch,
    check_schema,
    rules_of,
    section_rules,
)

if TYPE_CHECKING:
    from privbench.data import FederatedData  # a name only type checkers see: its parameter has no declared range


class Settings:
    """A user's nested settings."""

    def __init__(self, depth: Annotated[int, Number(integer=True, low=1, high=3)] = 2, verbose: Switch = False):
        self.depth, self.verbose = depth, verbose


class Base:
    def __init__(self, steps: PositiveInt = 10, data: FederatedData | None = None):
        self.steps, self.data = steps, data


class UserAttack(Base):
    """A user's ``_target_``: its own ranges, its base's through ``**kwargs``, nested settings."""

    def __init__(self, scale: Annotated[float, Number(low=0, high=2, open_low=True)] = 1.0,
                 nested: Annotated[dict[str, Any] | None, Nested(Settings)] = None, label: str = "x", **kwargs: Any):
        super().__init__(**kwargs)
        self.scale, self.nested, self.label = scale, nested, label


TARGET = f"{__name__}.UserAttack"


def test_a_constructor_declares_its_ranges_its_bases_and_its_nested_settings():
    assert rules_of(UserAttack) == {"scale": Number(low=0, high=2, open_low=True),
                                    "nested.depth": Number(integer=True, low=1, high=3), "nested.verbose": Flag(),
                                    "steps": POSITIVE_INT}  # `data` (a TYPE_CHECKING name) and `label`: no range


def test_privbench_own_constructors_declare_the_ranges_of_their_keys():
    from privbench.fl.protocols import FedAvg, GeneFL

    assert rules_of(FedAvg)["lr"] is RATE and rules_of(FedAvg)["rounds"] is POSITIVE_INT  # from FederatedProtocol
    assert isinstance(rules_of(GeneFL)["gene.gamma"], Gamma) and rules_of(GeneSettings)["adaptive"] == Flag()
    assert section_rules("data", {"_target_": "privbench.data.FederatedData.build"})["num_clients"] is POSITIVE_INT
    assert section_rules("victim", {})["num_images"] is POSITIVE_INT  # the audit's own section, no _target_
    assert section_rules("metrics", {})["recovered_ssim"] == Number(low=-1, high=1)


@pytest.mark.parametrize("node, message", [
    ({"scale": 0}, "attack.scale=0: must be a number > 0 and <= 2"),
    ({"steps": 0}, "attack.steps=0: must be an integer >= 1"),
    ({"nested": {"depth": 4}}, "attack.nested.depth=4: must be an integer >= 1 and <= 3"),
    ({"nested": {"verbose": "maybe"}}, "attack.nested.verbose='maybe': must be true or false"),
    ({"steps": 2.5}, "attack.steps=2.5: must be an integer >= 1"),
])
def test_a_user_target_is_checked_by_its_own_declared_ranges(node, message):
    assert sys.modules[__name__].UserAttack is UserAttack  # importable by its path, as a config names it
    with pytest.raises(ConfigError, match=rf"^{message.replace('(', '[(]').replace(')', '[)]')}$"):
        check_schema({"attack": {"_target_": TARGET, **node}})


def test_values_in_range_and_keys_without_a_range_pass():
    check_schema({"attack": {"_target_": TARGET, "scale": 2, "steps": 1, "nested": {"depth": 3}, "label": 5}})
    check_schema({"attack": {"_target_": "no.such.module.Attack", "steps": -1}})  # building it says why, later
    check_schema({"fl": {"lr": -1}})  # no _target_: nothing declares fl's ranges (the composed config has one)
    with pytest.raises(ConfigError, match=r"^fl.gene.gamma=2.0: is ambiguous"):
        check_schema({"fl": {"_target_": "privbench.fl.protocols.GeneFL", "gene": {"gamma": 2.0}}})


ALIASES = ("PositiveInt", "Count", "Positive", "NonNegative", "Fraction", "Rate", "Weight", "Switch", "Iterations",
           "Restarts", "PublicImages", "Shadows", "Candidates", "ScoringBatch", "Probability", "ClipNorm",
           "Annotated[")


def test_every_declared_range_of_a_shipped_target_is_read():
    """A range written in a parameter's type is one the check reads: an annotation that does not evaluate (a name
    only type checkers see in the same signature) or that hides the range (``PositiveInt | None``) fails here."""
    import inspect
    from pathlib import Path

    import yaml
    from hydra.utils import get_object

    from privbench.build import constructors

    conf = Path(__file__).resolve().parents[1] / "privbench" / "conf"
    targets = {node["_target_"] for f in conf.glob("*/*.yaml") if f.parent.name != "experiment"
               for node in [yaml.safe_load(f.read_text())] if isinstance(node, dict) and "_target_" in node}
    assert len(targets) > 40
    lost = []
    for target in sorted(targets):
        obj = get_object(target)
        declared = {n.split(".")[0] for n in rules_of(obj)}
        for init, _ in constructors(obj):
            for name, param in inspect.signature(init).parameters.items():
                if any(a in str(param.annotation) for a in ALIASES) and name not in declared:
                    lost.append(f"{target}.{name}: {param.annotation}")
    assert not lost, lost
