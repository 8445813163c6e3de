"""How the `spanlift` commands build their options: from the typed settings, once.

A settings dataclass is the one source of an option's name, type, default and help:
`add_field_options(parser, FitSettings, ["iterations", "lr"])` adds `--iterations` and `--lr`
typed as the fields are, defaulting to the fields' defaults, explained by the docstrings written
under the fields. `--help` shows every default from the code (`DefaultsShown`).
"""

import argparse
import ast
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, fields
from functools import cache
from pathlib import Path
from typing import Any, NoReturn

import yaml

from spanlift.cli.paths import STORE, Check, declare, path_option
from spanlift.errors import SettingsError
from spanlift.registry import Registry

TRACKING_DEFAULTS = "$MLFLOW_TRACKING_URI, else sqlite:///mlflow.db"
DEFAULT_CACHE = Path(".spanlift") / "cache"


class DefaultsShown(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` appends each option's default, as the code sets it, unless there is nothing to
    show (no default, a switch that is off, an empty list) or the help explains the default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        default = action.default
        nothing = default is None or default is False or default == []
        if nothing or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


class OneLineErrors(argparse.ArgumentParser):
    """A parser whose usage errors are one line, like every other user error, and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class CommandParser(OneLineErrors):
    """A command's parser that adds its options only when the command is used (parsed, or asked
    for its help): `spanlift X` imports the registries of X's options, not of every command."""

    def __init__(
        self, *args: Any, add_options: Callable[[Any], None] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.add_options = add_options

    def with_options(self) -> "CommandParser":
        if self.add_options is not None:
            add, self.add_options = self.add_options, None
            add(self)
        return self

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        return super(CommandParser, self.with_options()).parse_known_args(args, namespace)

    def format_help(self) -> str:
        return super(CommandParser, self.with_options()).format_help()

    def format_usage(self) -> str:
        return super(CommandParser, self.with_options()).format_usage()


Kept = str | Callable[[argparse.Namespace], str]
"""What an interrupted command leaves, said after Ctrl-C: a sentence, or one made from its
arguments (`spanlift.cli.endings`)."""


def command(
    sub: Any,
    name: str,
    summary: str,
    run: Callable[..., Any],
    add_options: Callable[[Any], None] | None = None,
    kept: Kept = "nothing was written",
) -> argparse.ArgumentParser:
    """The subcommand `name`, running `run(args)`, its options added by `add_options(parser)`
    when it is used, its defaults shown in its `--help`; `kept`: what Ctrl-C leaves of its work."""
    parser = sub.add_parser(
        name,
        help=summary,
        description=summary,
        formatter_class=DefaultsShown,
        add_options=add_options,
    )
    parser.set_defaults(run=run, kept=kept)
    return parser


@cache
def field_docs(settings: type) -> dict[str, str]:
    """The docstring written under each field of the dataclass `settings`, on one line."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(settings)))
    body = tree.body[0].body
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def option_type(annotation: Any) -> Callable[[str], Any]:
    """How an option's text is read: as the field's type (`int | None` → int, `Path | None` →
    Path; a choice of types, `int | str`, as YAML reads it), then checked by the rules its
    annotation writes (`PositiveInt`, `platform.sweep.schema`), so `--evaluators 0` is refused
    as the sweep file's `evaluators: 0` is."""
    from spanlift.platform.sweep.schema import unwrapped

    base, rules = unwrapped(annotation)
    kinds = [unwrapped(k)[0] for k in typing.get_args(base)] if _is_union(base) else [base]
    kinds = [k for k in kinds if k is not type(None)]
    read = kinds[0] if len(kinds) == 1 else yaml.safe_load

    def parsed(text: str) -> Any:
        value = read(text)
        if len(kinds) > 1 and not isinstance(value, tuple(kinds)):
            raise argparse.ArgumentTypeError(f"expected {rules[0].expected}, got {text!r}")
        for rule in rules:
            if not rule.holds(value):
                raise argparse.ArgumentTypeError(f"expected {rule.expected}, got {text!r}")
        return value

    parsed.__name__ = getattr(read, "__name__", "value")  # argparse's "invalid int value"
    return parsed if rules or len(kinds) > 1 else read


def _is_union(annotation: Any) -> bool:
    return isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union


def among(registry: Registry) -> str:
    """The names a registry holds, for a help text: 'one of: a, b, c'."""
    return f"one of: {', '.join(registry.names())}"


def add_field_options(
    parser: argparse.ArgumentParser,
    settings: type,
    names: Iterable[str],
    defaults: Mapping[str, Any] | None = None,
    choices: Mapping[str, Registry] | None = None,
    paths: Mapping[str, Check] | None = None,
) -> None:
    """`--<name>` for each named field of the dataclass `settings` (underscores become dashes):
    read as the field's type, defaulting to the field's default (or to `defaults[name]`, where a
    command differs), with the field's docstring as help; a name in `choices` lists the names of
    its registry in the help (the registry itself checks the value, with its own message); a
    name in `paths` is a path checked by its role before the command runs (`cli.paths`)."""
    by_name = {f.name: f for f in fields(settings)}
    hints = typing.get_type_hints(settings, include_extras=True)
    docs, defaults, choices, paths = (
        field_docs(settings),
        defaults or {},
        choices or {},
        paths or {},
    )
    for name in names:
        default = defaults.get(name, by_name[name].default)
        if default is MISSING:
            raise TypeError(f"{settings.__name__}.{name} has no default to offer")
        help_text = docs.get(name, "")
        if name in choices:
            help_text = f"{help_text} ({among(choices[name])})".strip()
        action = parser.add_argument(
            "--" + name.replace("_", "-"),
            type=option_type(hints[name]),
            default=default,
            help=help_text or name.replace("_", " "),
        )
        if name in paths:
            declare(parser, action, paths[name])


def field_values(args: argparse.Namespace, settings: type, names: Iterable[str]) -> dict[str, Any]:
    """The parsed values of the options `add_field_options` added, by field name."""
    known = {f.name for f in fields(settings)}
    return {name: getattr(args, name) for name in names if name in known}


def parse_settings(pairs: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs into a dict; values are read as YAML (3 → int, true → bool, {..} → dict)."""
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SettingsError(f"--set expects key=value, got {pair!r}")
        settings[key] = yaml.safe_load(value)
    return settings


def add_key_values(parser: argparse.ArgumentParser, flag: str, help_text: str) -> None:
    """A repeatable `flag KEY=VALUE` option, collected as a list (read by `parse_settings`)."""
    parser.add_argument(flag, action="append", default=[], metavar="KEY=VALUE", help=help_text)


def add_backbone_options(parser: argparse.ArgumentParser, default: str = "digits") -> None:
    """`--backbone NAME` and its repeatable `--backbone-option KEY=VALUE`."""
    from spanlift.backbones import BACKBONES

    parser.add_argument(
        "--backbone", default=default, help=f"registered backbone ({among(BACKBONES)})"
    )
    add_key_values(
        parser,
        "--backbone-option",
        "backbone option, e.g. weights=model.pkl (see `spanlift backbones`)",
    )


def add_solver_options(parser: argparse.ArgumentParser) -> None:
    """`--solver NAME --nfe N [--schedule S] [--set KEY=VALUE …]`: one solver to build."""
    from spanlift.solvers import SOLVERS

    parser.add_argument("--solver", required=True, help=f"registered solver ({among(SOLVERS)})")
    parser.add_argument(
        "--nfe", type=int, required=True, help="model evaluations the solver spends"
    )
    add_schedule_option(parser)
    add_key_values(parser, "--set", "solver setting (see `spanlift solvers`)")


def add_schedule_option(parser: argparse.ArgumentParser, help_text: str = "σ grid") -> None:
    """`--schedule NAME`, defaulting to a solver spec's schedule, its names from the registry."""
    from spanlift.solvers import SolverSpec
    from spanlift.solvers.schedules import SCHEDULES

    default = next(f.default for f in fields(SolverSpec) if f.name == "schedule")
    parser.add_argument(
        "--schedule",
        default=default,
        help=f"{help_text} ({among(SCHEDULES)}; see spanlift/solvers/schedules.py)",
    )


def add_tracking_uri(
    parser: argparse.ArgumentParser, store_defaults: str = TRACKING_DEFAULTS
) -> None:
    """`--tracking-uri URI`, a local store's folder checked before the command's work."""
    path_option(
        parser, "--tracking-uri", STORE, type=str, help=f"MLflow store (default: {store_defaults})"
    )


def add_tracking_options(
    parser: argparse.ArgumentParser, store_defaults: str = TRACKING_DEFAULTS
) -> None:
    """`--tracking-uri URI` and `--no-tracking`."""
    add_tracking_uri(parser, store_defaults)
    parser.add_argument("--no-tracking", action="store_true", help="record nothing in MLflow")


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    """`--address` and `--num-cpus`: the Ray cluster to join, or the local Ray's size."""
    parser.add_argument("--address", help="Ray cluster address (default: a local Ray)")
    parser.add_argument("--num-cpus", type=int, help="CPUs of the local Ray (default: all)")


def positive(flag: str, value: int) -> int:
    """`value`, refused unless ≥ 1, with the option's name in the message."""
    if value < 1:
        raise SettingsError(f"{flag}: expected a positive number, got {value}")
    return value
