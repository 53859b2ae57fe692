"""Help as a terminal shows it, through typer's and click's public hooks: a command class
(``cls=``) whose context formats help with :class:`PlainFormatter` and lists options in panels
by topic (``typer.Option(rich_help_panel=...)`` or a command's :data:`Command.panels` table).

Every command of the ``layerlab`` app uses these classes (:class:`Typer` makes them the default),
so ``--help`` at 80 columns keeps flag names whole, drops the docstrings' ````code```` quotes and
groups a long command's options (``run live``: 40 flags) under headings a reader can scan.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:  # the class itself is the public Context.formatter_class (click's HelpFormatter)
    from typer._click.formatting import HelpFormatter as _HelpFormatter
else:
    _HelpFormatter = typer.Context.formatter_class

_NB = "\u2011"  # a non-breaking hyphen: one column wide, as "-" is
_LIST = re.compile(r"(\.\.\.\]?)? <list\[(\w+)\]>")  # typer's type of a repeatable parameter
_REQUIRED = re.compile(r"\{([^{}]+?)\}(?:\.\.\.)?|\[\[([^\[\]]+?\.\.\.)\]\]\.\.\.")  # {RUN}, {PATH...}...
OTHER = "Options"  # the heading of options no panel names


def _protect(text: str) -> str:
    """``text`` without ````code```` quotes, its hyphens made non-breaking: click wraps where a
    hyphen is (``--max-`` / ``error-rate``, ``/work/my-`` / ``repo/data``), so a flag name or a
    path would be cut; :meth:`PlainFormatter.getvalue` puts the hyphens back."""
    return text.replace("``", "").replace("-", _NB)


class PlainFormatter(_HelpFormatter):
    """click's help formatter, wrapping every text to the terminal with flag names kept whole."""

    def write_usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        """The usage line as click writes it: ``RUN``, ``PATH...``, ``[RUN...]`` (typer writes
        a required argument as ``{RUN}`` and a repeated one as ``{PATH...}...``)."""
        args = _REQUIRED.sub(lambda m: m[1] or f"[{m[2]}]", args)
        super().write_usage(prog, _protect(args), prefix)

    def write_text(self, text: str) -> None:
        super().write_text(_protect(text))

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        def kind(m: re.Match[str]) -> str:  # ``PATH...`` says it repeats; ``--model <str>...``
            return m[1] if m[1] else f" <{m[2]}>..."

        rows = [(_LIST.sub(kind, a), _protect(b)) for a, b in rows]
        super().write_dl(rows, col_max, col_spacing)

    def getvalue(self) -> str:
        return str(super().getvalue()).replace(_NB, "-")


class Context(typer.Context):
    """A command's context: its help is written by :class:`PlainFormatter`."""

    formatter_class = PlainFormatter


def panel_of(param: Any, panels: Mapping[str, Sequence[str]]) -> str:
    """The heading ``param`` is listed under: its own ``rich_help_panel``, else the panel of
    ``panels`` (heading -> parameter names) that names it, else :data:`OTHER`."""
    own = getattr(param, "rich_help_panel", None)
    if own:
        return str(own)
    return next((h for h, names in panels.items() if param.name in names), OTHER)


def format_panels(cmd: Any, ctx: Any, formatter: Any, panels: Mapping[str, Sequence[str]]) -> None:
    """The arguments, then the options in panels: in the order of ``panels``, then any other
    panel in the order its first option is declared, then :data:`OTHER` (``--help`` included)."""
    def place(param: Any) -> int:  # its place in its panel of ``panels``, else its declaration's
        names = panels.get(panel_of(param, panels), ())
        return names.index(param.name) if param.name in names else len(names)

    args: list[tuple[str, str]] = []
    opts: dict[str, list[tuple[str, str]]] = {h: [] for h in panels}
    for param in sorted(cmd.get_params(ctx), key=place):  # a stable sort
        rv = param.get_help_record(ctx)
        if rv is None:
            continue
        if param.param_type_name == "argument":
            args.append(rv)
        else:
            opts.setdefault(panel_of(param, panels), []).append(rv)
    if args:
        with formatter.section("Arguments"):
            formatter.write_dl(args)
    other = opts.pop(OTHER, [])
    for heading, rows in [*opts.items(), (OTHER, other)]:
        if rows:
            with formatter.section(heading):
                formatter.write_dl(rows)


class Command(TyperCommand):
    """A ``layerlab`` command: plain help, options in panels (:func:`format_panels`)."""

    context_class = Context
    panels: ClassVar[Mapping[str, Sequence[str]]] = {}  # heading -> parameter names, in order

    def format_options(self, ctx: Any, formatter: Any) -> None:
        format_panels(self, ctx, formatter, self.panels)


def panelled(panels: Mapping[str, Sequence[str]]) -> type[Command]:
    """A :class:`Command` class whose options are listed under ``panels`` (heading -> parameter
    names): ``@group.command("live", cls=panelled({...}))``."""
    return type("PanelledCommand", (Command,), {"panels": dict(panels)})


class Group(TyperGroup):
    """A ``layerlab`` command group: plain help (its commands listed as click lists them)."""

    context_class = Context


class Typer(typer.Typer):
    """``typer.Typer`` whose groups and commands are :class:`Group` and :class:`Command`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        # click's own help: it wraps every flag and text to the terminal (80 columns included);
        # rich's option tables cut long flag names ("--target-versi…") at 80 columns
        kwargs.setdefault("rich_markup_mode", None)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, *, cls: Any = None, **kwargs: Any) -> Any:
        return super().command(name, cls=cls or Command, **kwargs)
