"""Each config key's description, for ``--help``: the config files' comments, else the docstring of what a group builds.

A key's description is the comment on its line (``lr: 0.1  # local SGD learning rate``) or on the
lines just above it in the file that defines it (``conf/config.yaml`` or ``conf/<group>/<option>.yaml``);
otherwise the ``Args:`` entry of that name in the docstrings of the group's ``_target_`` (its class
and the classes it derives from); the range its constructor declares (``privbench.schema``) goes in front, in brackets.
``--help`` prints the composed config with them as comments.
"""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from privbench.schema import section_rules
from privbench.studies import study_folders

#: Where privbench's config files live.
CONF = Path(__file__).resolve().parent / "conf"
_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w-]*):(?P<rest>.*)$")
_ARG = re.compile(r"^(?P<indent>\s*)\*{0,2}(?P<name>\w+)(?: \([^)]*\))?: ?(?P<text>.*)$")


def _comment(rest: str) -> str:
    """The ``# comment`` ending a YAML value, or ``""`` (a ``#`` inside quotes is not one)."""
    quote = ""
    for i, ch in enumerate(rest):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[i + 1:].strip()
    return ""


def _key_paths(lines: list[str]) -> list[tuple[str, "re.Match[str] | None", str]]:
    """Each YAML line with its key match and dotted key path (``gene.gamma``); no match and ``""`` for lines
    that hold no key (comments, list items, blanks)."""
    out: list[tuple[str, re.Match[str] | None, str]] = []
    stack: list[tuple[int, str]] = []
    for line in lines:
        match = _KEY.match(line)
        if not match or line.lstrip().startswith(("- ", "#")):
            out.append((line, None, ""))
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        out.append((line, match, ".".join(k for _, k in stack)))
    return out


def yaml_comments(text: str) -> dict[str, str]:
    """``{dotted.key: comment}`` for the keys of a YAML file that carry a comment on or just above their line."""
    out: dict[str, str] = {}
    above: list[str] = []
    seen_key = False  # comments before the first key describe the file, not a key
    for line, match, path in _key_paths(text.splitlines()):
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("#").strip())
            continue
        if match is None:
            above = []
            continue
        comment = _comment(match["rest"]) or (" ".join(above) if above and seen_key else "")
        if comment:
            out[path] = comment
        above, seen_key = [], True
    return out


def docstring_args(target: str) -> dict[str, str]:
    """``{argument: description}`` from the ``Args:`` sections of ``target`` and the classes it derives from."""
    module, _, name = target.rpartition(".")
    try:
        obj: Any = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        parent, _, cls = module.rpartition(".")  # Class.method targets
        try:
            obj = getattr(getattr(importlib.import_module(parent), cls), name)
        except (ImportError, AttributeError, ValueError):
            return {}
    docs = [inspect.getdoc(c) or "" for c in inspect.getmro(obj)] if inspect.isclass(obj) else [inspect.getdoc(obj) or ""]
    out: dict[str, str] = {}
    for doc in docs:
        for name_, text in _args_section(doc).items():
            out.setdefault(name_, text)
    return out


def _args_section(doc: str) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = doc.splitlines()
    if "Args:" not in (line.strip() for line in lines):
        return out
    start = [line.strip() for line in lines].index("Args:") + 1
    base, current = None, ""
    for line in lines[start:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG.match(line)
        if base is None and match:
            base = indent
        if base is None or indent < base:
            break
        if indent == base and match:
            current = match["name"]
            out[current] = match["text"].strip()
        elif current:
            out[current] += " " + line.strip()
    return {k: " ".join(v.replace("``", "").split()) for k, v in out.items() if not k.startswith("_")}


def _option_files(folder: Path, option: str) -> list[Path]:
    """``folder/option.yaml``, then the options of the same group its ``defaults`` list builds on."""
    files: list[Path] = []
    todo = [option]
    while todo:
        path = folder / f"{todo.pop(0)}.yaml"
        if not path.is_file() or path in files:
            continue
        files.append(path)
        loaded = OmegaConf.to_container(OmegaConf.load(path))
        defaults = loaded.get("defaults") if isinstance(loaded, dict) else None
        todo += [d for d in (defaults or []) if isinstance(d, str) and d != "_self_"]
    return files


def describe(cfg: DictConfig) -> dict[str, str]:
    """Each key of the composed ``cfg`` that has a description: comments first, then docstrings."""
    out: dict[str, str] = {}
    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}
    for group, option in dict(choices).items():
        if option is None or str(group).startswith("hydra") or "/" in str(group):
            continue
        folders = [CONF / str(group), *(study / str(group) for study in study_folders())]
        folder = next((f for f in folders if (f / f"{option}.yaml").is_file()), folders[0])
        for i, path in enumerate(_option_files(folder, str(option))):
            text = path.read_text()
            first = next((line for line in text.splitlines() if line.strip()), "")
            if first.startswith("#") and i == 0:
                out[str(group)] = first.lstrip("#").strip()
            for key, comment in yaml_comments(text).items():
                if key != "defaults":
                    out.setdefault(f"{group}.{key}", comment)
    top = (CONF / "config.yaml").read_text()
    out.update({k: v for k, v in yaml_comments(top).items() if k.split(".")[0] not in ("hydra", "defaults")})
    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    for group, node in plain.items():
        name = str(group)
        if name != "hydra" and isinstance(node, dict) and "_target_" in node:
            for arg, text in docstring_args(str(node["_target_"])).items():
                out.setdefault(f"{name}.{arg}", text)
        for key, rule in (section_rules(name, node).items() if name != "hydra" else ()):
            described = out.get(f"{name}.{key}")
            out[f"{name}.{key}"] = f"[{rule.allowed()}] {described}" if described else f"[{rule.allowed()}]"
    return out


def annotated_yaml(cfg: DictConfig, descriptions: dict[str, str], *, width: int = 110) -> str:
    """``cfg`` (without ``hydra``) as YAML, each key that has a description followed by it as a comment."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(plain, dict)
    plain.pop("hydra", None)
    lines = []
    for line, match, path in _key_paths(OmegaConf.to_yaml(OmegaConf.create(plain)).splitlines()):
        text = descriptions.get(path) if match is not None else None
        if text:
            room = max(20, width - len(line) - 4)
            line = f"{line}  # {text if len(text) <= room else text[:room - 3] + '...'}"
        lines.append(line)
    return "\n".join(lines)


def help_config(*, _root_: DictConfig) -> str:
    """The ``privbench_keys`` resolver: the composed config with descriptions, for Hydra's help template.

    ``$`` is doubled because Hydra substitutes the template with ``string.Template`` afterwards.
    """
    return annotated_yaml(_root_, describe(_root_)).replace("$", "$$")
